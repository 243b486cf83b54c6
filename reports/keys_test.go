package reports

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
)

func TestWriteKeys(t *testing.T) {
	at := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	keys := []auth.Key{
		{ID: "k1", Scope: auth.Scope{Kind: auth.KindAdmin}, CreatedAt: at, Note: "ops"},
		{ID: "k2", Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}, Portal: true, CreatedAt: at, ExpiresAt: at.Add(time.Hour), RevokedAt: at},
	}
	var buf bytes.Buffer
	if err := WriteKeys(&buf, keys); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID  ") ||
		strings.Join(strings.Fields(lines[1]), " ") != "k1 admin api 2026-11-01T10:00:00Z - - ops" ||
		strings.Join(strings.Fields(lines[2]), " ") != "k2 tenant:acme portal 2026-11-01T10:00:00Z 2026-11-01T11:00:00Z 2026-11-01T10:00:00Z -" {
		t.Errorf("table:\n%s", buf.String())
	}
	buf.Reset()
	if err := WriteKeyCreated(&buf, keys[1]); err != nil || buf.String() != "created key k2 (tenant:acme, portal, expires 2026-11-01T11:00:00Z); the token is shown once:\n" {
		t.Errorf("%q, %v", buf.String(), err)
	}
}
