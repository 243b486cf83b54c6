//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive flock on dir/LOCK: two collectors appending
// to one spool would interleave records. The kernel drops the lock when the
// process dies, so a SIGKILLed collector never leaves a stale lock.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: held by another spool: %w", path, err)
	}
	return f, nil
}
