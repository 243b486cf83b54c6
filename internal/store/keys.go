package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
)

const keyColumns = "key_id, secret_sha256, scope, portal, note, created_at, expires_at, revoked_at"

// The statements of this file (internal/chdbcheck runs them on chDB too).
const (
	insertKeySQL   = "INSERT INTO api_keys (" + keyColumns + ", version)"
	keysSQL        = "SELECT " + keyColumns + " FROM api_keys FINAL ORDER BY created_at DESC, key_id"
	keySQL         = "SELECT " + keyColumns + " FROM api_keys FINAL WHERE key_id = ?"
	insertAuditSQL = "INSERT INTO api_audit (at, key_id, scope, method, route, path, status, remote, request_id)"
	auditSQL       = "SELECT at, key_id, scope, method, route, path, status, remote, request_id FROM api_audit" +
		" WHERE key_id = ? ORDER BY at, request_id"
)

// SaveKey stores a new key.
func (s *Store) SaveKey(ctx context.Context, k auth.Key) error {
	return s.writeKey(ctx, k, 1)
}

func (s *Store) writeKey(ctx context.Context, k auth.Key, version uint64) error {
	return s.insert(ctx, "save key "+k.ID, insertKeySQL, [][]any{keyRow(k, version)}, nil)
}

// keyRow is k's row of insertKeySQL at version.
func keyRow(k auth.Key, version uint64) []any {
	var portal uint8
	if k.Portal {
		portal = 1
	}
	return []any{k.ID, k.SecretSHA256, k.Scope.String(), portal, k.Note, k.CreatedAt.UTC(),
		orEpoch(k.ExpiresAt), orEpoch(k.RevokedAt), version}
}

func orEpoch(t time.Time) time.Time {
	if t.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return t.UTC()
}

func fromEpoch(t time.Time) time.Time {
	if t.Unix() == 0 {
		return time.Time{}
	}
	return t.UTC()
}

// Keys lists every key, newest first.
func (s *Store) Keys(ctx context.Context) ([]auth.Key, error) {
	return s.queryKeys(ctx, keysSQL)
}

// Key reads one key; an error wrapping auth.ErrUnknownKey when there is none.
func (s *Store) Key(ctx context.Context, id string) (auth.Key, error) {
	keys, err := s.queryKeys(ctx, keySQL, id)
	if err != nil {
		return auth.Key{}, err
	}
	if len(keys) == 0 {
		return auth.Key{}, fmt.Errorf("key %q: %w", id, auth.ErrUnknownKey)
	}
	return keys[0], nil
}

func (s *Store) queryKeys(ctx context.Context, q string, args ...any) ([]auth.Key, error) {
	return queryAll(ctx, s, "read keys", q, args, func(scan scanFunc) (auth.Key, error) {
		var (
			k      auth.Key
			scope  string
			portal uint8
			err    error
		)
		if err = scan(&k.ID, &k.SecretSHA256, &scope, &portal, &k.Note, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt); err != nil {
			return k, err
		}
		if k.Scope, err = auth.ParseScope(scope); err != nil {
			return k, fmt.Errorf("read key %s: %w", k.ID, err)
		}
		k.Portal = portal == 1
		k.CreatedAt, k.ExpiresAt, k.RevokedAt = k.CreatedAt.UTC(), fromEpoch(k.ExpiresAt), fromEpoch(k.RevokedAt)
		return k, nil
	})
}

// RevokeKey marks the key revoked from at on. Revoking twice keeps the
// first time.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (auth.Key, error) {
	k, err := s.Key(ctx, id)
	if err != nil {
		return auth.Key{}, err
	}
	if !k.RevokedAt.IsZero() {
		return k, nil
	}
	k.RevokedAt = at.UTC().Truncate(time.Second)
	if err := s.writeKey(ctx, k, 2); err != nil {
		return auth.Key{}, err
	}
	return k, nil
}

// RecordAudit appends entries in one insert.
func (s *Store) RecordAudit(ctx context.Context, entries []auth.AuditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	rows := make([][]any, len(entries))
	for i, e := range entries {
		rows[i] = auditRow(e)
	}
	return s.insert(ctx, "record audit", insertAuditSQL, rows, nil)
}

// auditRow is e's row of insertAuditSQL.
func auditRow(e auth.AuditEntry) []any {
	return []any{e.At.UTC(), e.KeyID, e.Scope, e.Method, e.Route, e.Path, uint16(e.Status), e.Remote, e.RequestID}
}

// Audit lists the key's uses, oldest first (keys audit, tests).
func (s *Store) Audit(ctx context.Context, keyID string) ([]auth.AuditEntry, error) {
	return queryAll(ctx, s, "read audit", auditSQL, []any{keyID}, func(scan scanFunc) (auth.AuditEntry, error) {
		var e auth.AuditEntry
		var status uint16
		err := scan(&e.At, &e.KeyID, &e.Scope, &e.Method, &e.Route, &e.Path, &status, &e.Remote, &e.RequestID)
		e.Status = int(status)
		e.At = e.At.UTC()
		return e, err
	})
}
