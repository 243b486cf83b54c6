//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package spool

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDir only creates dir/LOCK where flock is not available; gpumeter
// collectors run on Linux, where lock_unix.go applies.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
