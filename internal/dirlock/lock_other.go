//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

// Package dirlock gives one process a directory: the collector's spool,
// the server's audit queue.
package dirlock

import (
	"fmt"
	"os"
	"path/filepath"
)

// Lock only creates dir/LOCK where flock is not available; gpumeter runs
// on Linux, where lock_unix.go applies.
func Lock(dir, what string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
