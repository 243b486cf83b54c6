package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// An endpoint URL with user:password and an api_key: `webhooks replay`
// to an unreachable receiver fails without printing either (its log lines,
// its error, `webhooks list`), the attempts it stored hold neither, and a
// config whose URL is refused names the field without them.
func TestWebhooksKeepURLCredentialsOut(t *testing.T) {
	const password, apiKey = "s3cr3t-pass", "AKIA-very-secret-key"
	dsn := testDSN(t)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // connection refused: Go's *url.Error prints the whole URL
	url := strings.Replace(gone.URL, "http://", "http://alice:"+password+"@", 1) + "/hook?api_key=" + apiKey
	cfg := filepath.Join(t.TempDir(), "gpumeter.yaml")
	if err := os.WriteFile(cfg, []byte("webhooks:\n  max_attempts: 2\n  backoff_initial: 1ms\n  backoff_max: 2ms\n  endpoints:\n"+
		"    - {name: erp, url: \""+url+"\", secret: receiver-shared-secret-123}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ev, err := webhook.NewEvent(webhook.TypeInvoiceFinalized, time.Now(), map[string]string{"number": "GC-000009"})
	if err != nil {
		t.Fatal(err)
	}
	s := harness.OpenStore(t, dsn)
	if err := s.SaveEvents(context.Background(), []webhook.Event{ev}); err != nil {
		t.Fatal(err)
	}
	g := []string{"--clickhouse", dsn, "--config", cfg}
	code, out, stderr := gpumeter(t, append(g, "webhooks", "replay", ev.ID)...)
	if code == 0 {
		t.Fatalf("replay to an unreachable receiver succeeded: %s", out)
	}
	code2, list, stderr2 := gpumeter(t, append(g, "webhooks", "list")...)
	if code2 != 0 || !strings.Contains(list, "erp: failed after 2 attempts") {
		t.Fatalf("list: exit %d\n%s%s", code2, list, stderr2)
	}
	texts := map[string]string{"replay output": out + stderr, "list output": list + stderr2}
	sts, err := s.Events(context.Background(), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		for _, a := range st.Attempts["erp"] {
			texts["stored attempt"] += a.Error + "\n"
		}
	}
	if !strings.Contains(texts["stored attempt"], "api_key=redacted") || !strings.Contains(stderr, "***@") {
		t.Errorf("the redacted URL is not named: attempts %q, stderr %q", texts["stored attempt"], stderr)
	}

	// A URL the config refuses.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("webhooks:\n  endpoints:\n    - {name: erp, url: \"ftp://alice:"+password+"@host/x?api_key="+apiKey+"\", secret: receiver-shared-secret-123}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code3, out3, stderr3 := gpumeter(t, "--clickhouse", dsn, "--config", bad, "webhooks", "list")
	if code3 != 2 || !strings.Contains(stderr3, "webhooks.endpoints[0].url") {
		t.Errorf("bad URL: exit %d, %s; want 2 naming webhooks.endpoints[0].url", code3, stderr3)
	}
	texts["config error"] = out3 + stderr3
	for what, text := range texts {
		for _, secret := range []string{password, apiKey} {
			if strings.Contains(text, secret) {
				t.Errorf("%s shows %q:\n%s", what, secret, text)
			}
		}
	}
}
