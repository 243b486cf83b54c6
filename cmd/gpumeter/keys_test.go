package main

import (
	"strings"
	"testing"
)

func TestKeysCLI(t *testing.T) {
	dsn := testDSN(t)
	g := []string{"--clickhouse", dsn}
	code, token, stderr := cli(t, append(g, "keys", "create", "--scope", "tenant:acme", "--expires", "24h", "--note", "billing export")...)
	if code != 0 || !strings.HasPrefix(token, "gmk_") || !strings.Contains(stderr, "shown once") {
		t.Fatalf("create: %d %q %q", code, token, stderr)
	}
	id := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(token), "gmk_"), "_", 2)[0]
	code, out, _ := cli(t, append(g, "keys", "list")...)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "tenant:acme") || !strings.Contains(out, "billing export") ||
		strings.Contains(out, strings.TrimSpace(token)) {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out, _ := cli(t, append(g, "keys", "revoke", id)...); code != 0 || !strings.Contains(out, "revoked "+id) {
		t.Fatalf("revoke: %d %s", code, out)
	}
	code, out, _ = cli(t, append(g, "keys", "list")...)
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
		if code, _, stderr := cli(t, append(g, bad...)...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", bad, code, stderr)
		}
	}
}
