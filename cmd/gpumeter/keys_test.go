package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestKeysCLI(t *testing.T) {
	dsn := testDSN(t)
	g := []string{"--clickhouse", dsn}
	code, token, stderr := gpumeter(t, append(g, "keys", "create", "--scope", "tenant:acme", "--expires", "24h", "--note", "billing export")...)
	if code != 0 || !strings.HasPrefix(token, "gmk_") || !strings.Contains(stderr, "shown once") {
		t.Fatalf("create: %d %q %q", code, token, stderr)
	}
	id := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(token), "gmk_"), "_", 2)[0]
	code, out, _ := gpumeter(t, append(g, "keys", "list")...)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "tenant:acme") || !strings.Contains(out, "billing export") ||
		strings.Contains(out, strings.TrimSpace(token)) {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out, _ := gpumeter(t, append(g, "keys", "revoke", id)...); code != 0 || !strings.Contains(out, "revoked "+id) {
		t.Fatalf("revoke: %d %s", code, out)
	}
	code, out, _ = gpumeter(t, append(g, "keys", "list")...)
	revoked := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 6 && f[0] == id {
			revoked = f[5] != "-" // ID SCOPE KIND CREATED EXPIRES REVOKED NOTE
		}
	}
	if code != 0 || !revoked {
		t.Fatalf("after revoke: %d %s", code, out)
	}
	for _, bad := range [][]string{
		{"keys"},
		{"keys", "rotate"},
		{"keys", "create"},
		{"keys", "create", "--scope", "root"},
		{"keys", "create", "--scope", "tenant:a b"},
		{"keys", "create", "--scope", "tenant:acme", "--portal"},
		{"keys", "create", "--scope", "admin", "--portal", "--expires", "1h"},
		{"keys", "create", "--scope", "tenant:acme", "--expires", "-1h"},
		{"keys", "revoke"},
		{"keys", "revoke", "nosuchkey"},
	} {
		if code, _, stderr := gpumeter(t, append(g, bad...)...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", bad, code, stderr)
		}
	}
}

// keys create --expires 30d makes a key that expires in 30 days; a key for
// a tenant with no usage is made, with a warning on stderr.
func TestKeysCreateInDaysWarnsOfATenantWithoutUsage(t *testing.T) {
	dsn := testDSN(t)
	g := []string{"--clickhouse", dsn}
	samples := writeTemp(t, "s.csv", "host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds\n"+
		"h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n")
	if code, _, stderr := gpumeter(t, append(g, "import", "--quiet", samples)...); code != 0 {
		t.Fatalf("import: %d %s", code, stderr)
	}
	expires := regexp.MustCompile(`expires (\S+)\)`)
	before := time.Now()
	code, token, stderr := gpumeter(t, append(g, "keys", "create", "--scope", "tenant:acme", "--expires", "30d")...)
	after := time.Now()
	if code != 0 || !strings.HasPrefix(token, "gmk_") {
		t.Fatalf("create: %d %q %q", code, token, stderr)
	}
	m := expires.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no expiry in %q", stderr)
	}
	at, err := time.Parse(time.RFC3339, m[1])
	if err != nil || at.Before(before.Add(30*24*time.Hour).Truncate(time.Second)) || at.After(after.Add(30*24*time.Hour)) {
		t.Errorf("expires %s (%v); want 30 days after %s", m[1], err, before.Format(time.RFC3339))
	}
	if strings.Contains(stderr, "no usage") {
		t.Errorf("warned of acme, which has usage: %s", stderr)
	}
	code, token, stderr = gpumeter(t, append(g, "keys", "create", "--scope", "tenant:acmee", "--expires", "72h")...)
	if code != 0 || !strings.HasPrefix(token, "gmk_") || !strings.Contains(stderr, "no usage yet") || !strings.Contains(stderr, "tenant=acmee") {
		t.Errorf("a tenant without usage: exit %d, %q; want the key and a warning naming the tenant", code, stderr)
	}
}
