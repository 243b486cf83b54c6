package usage

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/rollup"
)

// Caching. Hourly rollups change only when a rollup run completes, so a
// query of closed hours is cached under the rollup's completed version
// and stays right until the next run. Raw samples of the hours not yet
// rolled up are cached briefly. The rollup state itself is read at most
// once a second, so answers are up to a second behind a finished run.
const (
	stateTTL      = time.Second
	rawTTL        = 5 * time.Second
	maxCacheItems = 4096
	maxCacheRows  = 1_000_000 // rows held across entries
)

type cacheEntry struct {
	rows    []Row
	version uint64    // hourly: the completed version the rows are of
	expires time.Time // raw: when they go stale
}

type cache struct {
	mu      sync.Mutex
	state   rollup.State
	stateAt time.Time
	rows    map[string]cacheEntry
	held    int // rows across entries
	// blocks are tenants' hourly rollup months (blocks.go), blockHeld
	// their rows.
	blocks    map[blockKey]*block
	blockHeld int
}

// RollupState is the rollup's state, read at most once per stateTTL.
func (s *Service) RollupState(ctx context.Context) (rollup.State, error) {
	c := &s.cache
	c.mu.Lock()
	if time.Since(c.stateAt) < stateTTL {
		st := c.state
		c.mu.Unlock()
		return st, nil
	}
	c.mu.Unlock()
	st, _, err := s.store.LoadRollupState(ctx, rollup.StateKey)
	if err != nil {
		return rollup.State{}, err
	}
	c.mu.Lock()
	c.state, c.stateAt = st, time.Now()
	c.mu.Unlock()
	return st, nil
}

// rows runs a store query through the cache: one tenant's hourly rows
// come from its month blocks (blocks.go), other hourly queries are kept
// while the rollup's completed version is version, raw ones rawTTL.
func (s *Service) rows(ctx context.Context, q Query, version uint64) ([]Row, error) {
	if tenant, ok := blockTenant(q); ok {
		return s.blockRows(ctx, q, tenant, version)
	}
	key := fmt.Sprintf("%s|%d|%d|%v|%s|%s|%s|%s", q.Source, q.From.Unix(), q.To.Unix(), q.GroupBy, q.Bucket, q.Tenant, q.Department, q.Scope)
	now := time.Now()
	c := &s.cache
	c.mu.Lock()
	if e, ok := c.rows[key]; ok {
		if (q.Source == SourceHourly && e.version == version) || (q.Source != SourceHourly && now.Before(e.expires)) {
			c.mu.Unlock()
			return e.rows, nil
		}
	}
	c.mu.Unlock()
	rows, err := s.store.Usage(ctx, q)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.rows == nil || len(c.rows) >= maxCacheItems || c.held+len(rows) > maxCacheRows {
		c.evict(now, version)
	}
	if old, ok := c.rows[key]; ok {
		c.held -= len(old.rows)
	}
	c.rows[key] = cacheEntry{rows: rows, version: version, expires: now.Add(rawTTL)}
	c.held += len(rows)
	c.mu.Unlock()
	return rows, nil
}

// evict drops entries that can no longer answer (raw ones expired, hourly
// ones of an older version), and everything when that is not enough.
func (c *cache) evict(now time.Time, version uint64) {
	if c.rows == nil {
		c.rows = map[string]cacheEntry{}
	}
	for k, e := range c.rows {
		if (e.expires.Before(now) && strings.HasPrefix(k, string(SourceRaw))) || (strings.HasPrefix(k, string(SourceHourly)) && e.version != version) {
			c.held -= len(e.rows)
			delete(c.rows, k)
		}
	}
	if len(c.rows) >= maxCacheItems || c.held > maxCacheRows/2 {
		c.rows, c.held = map[string]cacheEntry{}, 0
	}
}
