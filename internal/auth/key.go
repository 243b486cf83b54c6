// Package auth holds API keys and their scopes: what a key may read, how
// its secret is made, stored (hashed) and checked (in constant time). It
// is pure; internal/store keeps the keys and internal/server asks.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Kind is what a scope covers.
type Kind string

const (
	KindAdmin      Kind = "admin"      // everything
	KindDepartment Kind = "department" // the tenants of one department
	KindTenant     Kind = "tenant"     // one tenant
)

// Scope is what a key may read. Every store query that serves the API
// takes one and filters by it.
type Scope struct {
	Kind Kind
	Name string // the department or tenant; empty for admin
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`)

// ParseScope reads "admin", "department:NAME" or "tenant:NAME".
func ParseScope(s string) (Scope, error) {
	if s == string(KindAdmin) {
		return Scope{Kind: KindAdmin}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	sc := Scope{Kind: Kind(kind), Name: name}
	if !ok || (sc.Kind != KindDepartment && sc.Kind != KindTenant) {
		return Scope{}, fmt.Errorf("scope %q: want admin, department:NAME or tenant:NAME", s)
	}
	if !namePattern.MatchString(name) {
		return Scope{}, fmt.Errorf("scope %q: the name must be 1-128 letters, digits, '.', '_', '/' or '-'", s)
	}
	return sc, nil
}

// String is the scope as ParseScope reads it.
func (s Scope) String() string {
	if s.Kind == KindAdmin {
		return string(KindAdmin)
	}
	return string(s.Kind) + ":" + s.Name
}

// Validate checks a scope built by hand.
func (s Scope) Validate() error {
	_, err := ParseScope(s.String())
	return err
}

// Tenant and Department are the filters a store query applies for the
// scope ("" for none).
func (s Scope) Tenant() string {
	if s.Kind == KindTenant {
		return s.Name
	}
	return ""
}

// Department is the department filter of the scope.
func (s Scope) Department() string {
	if s.Kind == KindDepartment {
		return s.Name
	}
	return ""
}

// Allows says whether the scope may see a row of tenant in department.
func (s Scope) Allows(tenant, department string) bool {
	switch s.Kind {
	case KindAdmin:
		return true
	case KindDepartment:
		return department == s.Name
	case KindTenant:
		return tenant == s.Name
	}
	return false
}

// Key is a stored API key: its id, the sha256 of its secret (never the
// secret), its scope, and when it stops working.
type Key struct {
	ID           string
	SecretSHA256 string // hex
	Scope        Scope
	// Portal keys are short-lived tokens for embedding in a customer
	// portal; they must expire.
	Portal    bool
	Note      string
	CreatedAt time.Time
	ExpiresAt time.Time // zero: never
	RevokedAt time.Time // zero: not revoked
}

// tokenPrefix starts every token, so leaked tokens are easy to find.
const tokenPrefix = "gmk_"

// MaxPortalLifetime bounds a portal token's expiry.
const MaxPortalLifetime = 90 * 24 * time.Hour

// NewKeyRequest is what `keys create` asks for.
type NewKeyRequest struct {
	Scope   Scope
	Portal  bool
	Expires time.Duration // 0: never (not allowed for portal tokens)
	Note    string
}

// Validate reports every problem.
func (r NewKeyRequest) Validate() error {
	var errs []error
	if err := r.Scope.Validate(); err != nil {
		errs = append(errs, err)
	}
	if r.Expires < 0 {
		errs = append(errs, fmt.Errorf("expires %s: must not be negative", r.Expires))
	}
	if r.Portal && (r.Expires == 0 || r.Expires > MaxPortalLifetime) {
		errs = append(errs, fmt.Errorf("a portal token must expire, within %s", MaxPortalLifetime))
	}
	if r.Portal && r.Scope.Kind == KindAdmin {
		errs = append(errs, errors.New("a portal token cannot have the admin scope"))
	}
	if len(r.Note) > 256 {
		errs = append(errs, errors.New("note: at most 256 bytes"))
	}
	return fault.Validation(errors.Join(errs...))
}

// NewKey makes a key and its token. The token (gmk_ID_SECRET) is shown to
// the user once; only the secret's hash is stored.
func NewKey(r NewKeyRequest, now time.Time) (Key, string, error) {
	if err := r.Validate(); err != nil {
		return Key{}, "", err
	}
	id, err := randomText(9)
	if err != nil {
		return Key{}, "", err
	}
	secret, err := randomText(32)
	if err != nil {
		return Key{}, "", err
	}
	k := Key{ID: id, SecretSHA256: hashSecret(secret), Scope: r.Scope, Portal: r.Portal, Note: r.Note,
		CreatedAt: now.UTC().Truncate(time.Second)}
	if r.Expires > 0 {
		k.ExpiresAt = k.CreatedAt.Add(r.Expires)
	}
	return k, tokenPrefix + id + "_" + secret, nil
}

var keyAlphabet = strings.NewReplacer("_", ".", "-", "~")

func randomText(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random key: %w", err)
	}
	// No '_' in the output, so the token splits unambiguously, and no '-',
	// so a key id never reads as a flag (`keys revoke -x…` failed with exit
	// 2 for one key in 64). Both stay URL-safe ('.' and '~' are unreserved).
	return keyAlphabet.Replace(base64.RawURLEncoding.EncodeToString(b)), nil
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Errors of Verify and ParseToken, and of a key looked up by id. The API
// answers each of them 401 whatever its category; the categories are for
// the other callers (revoking an unknown key is a not found).
var (
	ErrMalformedToken = fault.Validation(errors.New("malformed token"))
	ErrUnknownKey     = fault.NotFound(errors.New("unknown key"))
	ErrWrongSecret    = fault.Validation(errors.New("wrong secret"))
	ErrExpired        = fault.Precondition(errors.New("key expired"))
	ErrRevoked        = fault.Precondition(errors.New("key revoked"))
)

// ParseToken splits a token into its key id and secret.
func ParseToken(token string) (id, secret string, err error) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return "", "", ErrMalformedToken
	}
	id, secret, ok = strings.Cut(rest, "_")
	if !ok || id == "" || len(secret) < 16 || len(token) > 200 {
		return "", "", ErrMalformedToken
	}
	return id, secret, nil
}

// Verify checks a secret against the key at now: the hash compared in
// constant time, then revocation and expiry.
func (k Key) Verify(secret string, now time.Time) error {
	if subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(k.SecretSHA256)) != 1 {
		return ErrWrongSecret
	}
	if !k.RevokedAt.IsZero() && !now.Before(k.RevokedAt) {
		return ErrRevoked
	}
	if !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) {
		return ErrExpired
	}
	return nil
}

// AuditEntry is one use of a key: who, what, when and from where.
type AuditEntry struct {
	At                  time.Time
	KeyID, Scope        string
	Method, Route, Path string
	Status              int
	Remote, RequestID   string
}

// ParseLifetime reads a key's lifetime: whole days (30d, up to 100 years)
// or a Go duration (72h).
func ParseLifetime(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 100*365 {
			return 0, fault.Validationf("%q: want whole days from 0 to 36500, such as 30d", v)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fault.Validationf("%q: want days (30d) or a duration (72h)", v)
	}
	return d, nil
}
