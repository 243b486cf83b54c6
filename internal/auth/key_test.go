package auth

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

func TestParseScope(t *testing.T) {
	for in, want := range map[string]Scope{
		"admin":               {Kind: KindAdmin},
		"tenant:acme":         {Kind: KindTenant, Name: "acme"},
		"department:research": {Kind: KindDepartment, Name: "research"},
		"tenant:ns-a/pod.b_1": {Kind: KindTenant, Name: "ns-a/pod.b_1"},
	} {
		got, err := ParseScope(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseScope(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "root", "tenant:", "tenant", "team:x", "tenant:a b", "tenant:'; DROP TABLE x", "admin:x", "tenant:" + strings.Repeat("a", 129)} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
}

func TestScopeAllows(t *testing.T) {
	cases := []struct {
		scope        string
		tenant, dept string
		want         bool
	}{
		{"admin", "acme", "research", true},
		{"tenant:acme", "acme", "research", true},
		{"tenant:acme", "globex", "research", false},
		{"tenant:acme", "", "", false},
		{"department:research", "globex", "research", true},
		{"department:research", "initech", "ops", false},
	}
	for _, c := range cases {
		s, _ := ParseScope(c.scope)
		if got := s.Allows(c.tenant, c.dept); got != c.want {
			t.Errorf("%s allows %s/%s = %v", c.scope, c.tenant, c.dept, got)
		}
	}
}

func TestKeyLifecycle(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	k, token, err := NewKey(NewKeyRequest{Scope: Scope{Kind: KindTenant, Name: "acme"}, Expires: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(k.SecretSHA256, token) || len(k.SecretSHA256) != 64 {
		t.Fatalf("stored hash %q", k.SecretSHA256)
	}
	id, secret, err := ParseToken(token)
	if err != nil || id != k.ID {
		t.Fatalf("ParseToken(%q) = %q, %v", token, id, err)
	}
	if err := k.Verify(secret, now); err != nil {
		t.Fatal(err)
	}
	if err := k.Verify(secret+"x", now); !errors.Is(err, ErrWrongSecret) {
		t.Errorf("wrong secret: %v", err)
	}
	if err := k.Verify(secret, now.Add(time.Hour)); !errors.Is(err, ErrExpired) {
		t.Errorf("at expiry: %v", err)
	}
	k.RevokedAt = now.Add(time.Minute)
	if err := k.Verify(secret, now.Add(2*time.Minute)); !errors.Is(err, ErrRevoked) {
		t.Errorf("revoked: %v", err)
	}
	_, other, _ := NewKey(NewKeyRequest{Scope: Scope{Kind: KindAdmin}}, now)
	if other == token {
		t.Fatal("two keys share a token")
	}
	for _, bad := range []string{"", "Bearer x", "gmk_", "gmk_id", "gmk_id_short", "xyz_" + token[4:]} {
		if _, _, err := ParseToken(bad); !errors.Is(err, ErrMalformedToken) {
			t.Errorf("ParseToken(%q): %v", bad, err)
		}
	}
}

// The API answers every authentication error 401; the categories serve
// the other callers (keys revoke of an unknown id is a not found).
func TestAuthErrorCategories(t *testing.T) {
	for _, tc := range []struct {
		err error
		is  func(error) bool
	}{
		{ErrMalformedToken, fault.IsValidation},
		{ErrWrongSecret, fault.IsValidation},
		{fmt.Errorf("key %q: %w", "k1", ErrUnknownKey), fault.IsNotFound},
		{ErrExpired, fault.IsPrecondition},
		{ErrRevoked, fault.IsPrecondition},
	} {
		if !tc.is(tc.err) {
			t.Errorf("%v: not in its category", tc.err)
		}
	}
}

func TestNewKeyRequestValidate(t *testing.T) {
	tenant := Scope{Kind: KindTenant, Name: "acme"}
	cases := []struct {
		r    NewKeyRequest
		want string
	}{
		{NewKeyRequest{Scope: tenant, Portal: true}, "must expire"},
		{NewKeyRequest{Scope: tenant, Portal: true, Expires: 365 * 24 * time.Hour}, "must expire"},
		{NewKeyRequest{Scope: Scope{Kind: KindAdmin}, Portal: true, Expires: time.Hour}, "admin scope"},
		{NewKeyRequest{Scope: Scope{Kind: "root"}}, "scope"},
		{NewKeyRequest{Scope: tenant, Expires: -time.Second}, "negative"},
	}
	for _, c := range cases {
		if err := c.r.Validate(); !fault.IsValidation(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a validation error saying %q", c.r, err, c.want)
		}
	}
	if err := (NewKeyRequest{Scope: tenant, Portal: true, Expires: 24 * time.Hour}).Validate(); err != nil {
		t.Error(err)
	}
}

// Key ids and secrets never hold '_' (the token's separator) or '-' (an
// id starting with it reads as a flag: `keys revoke -x…` exited 2).
func TestKeyTextIsSeparatorAndFlagSafe(t *testing.T) {
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 2000; i++ {
		k, token, err := NewKey(NewKeyRequest{Scope: Scope{Kind: KindAdmin}}, now)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(k.ID, "_-") {
			t.Fatalf("key id %q holds '_' or '-'", k.ID)
		}
		id, secret, err := ParseToken(token)
		if err != nil || id != k.ID || strings.ContainsAny(secret, "_-") {
			t.Fatalf("token %q: id %q secret %q err %v", token, id, secret, err)
		}
	}
}

func TestParseLifetime(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "0d": 0, "72h": 72 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := ParseLifetime(in); err != nil || got != want {
			t.Errorf("ParseLifetime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1.5d", "-1d", "d", "36501d", "30 days"} {
		if _, err := ParseLifetime(in); !fault.IsValidation(err) {
			t.Errorf("ParseLifetime(%q): %v, want a validation error", in, err)
		}
	}
}
