//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

// Package dirlock gives one process a directory: the collector's spool,
// the server's audit queue. Two writers in one directory would interleave
// or replay each other's records.
package dirlock

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Lock takes an exclusive flock on dir/LOCK; what names the directory's
// kind in the error. The kernel drops the lock when the process dies, so
// a SIGKILLed process never leaves a stale lock. Close the file to unlock.
func Lock(dir, what string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: held by another %s: %w", path, what, err)
	}
	return f, nil
}
