//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// openPTY opens a pseudo-terminal and returns its terminal end, closed
// when the test ends (Linux: /dev/ptmx, unlock, /dev/pts/N).
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatalf("unlock pty: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatalf("pty number: %v", errno)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}

// invoice render --format pdf (and chargeback --format pdf) refuses to write the PDF to a terminal,
// before it reads the config's customers or opens the store; a file,
// --out, or a text format on a terminal go on (and stop there, with no
// billing config and no store, which is not what this test looks at).
func TestPDFCommandsRefuseATerminal(t *testing.T) {
	const refusal = "not for a terminal"
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	tty := openPTY(t)
	// Nothing listens on port 1: should a case get that far, it fails at once.
	unreachable := "clickhouse://127.0.0.1:1/gpumeter"
	type ttyCase struct {
		name    string
		stdout  *os.File
		args    []string
		refused bool
	}
	cases := []ttyCase{
		{"pdf to a terminal is refused", tty, []string{"--format", "pdf"}, true},
		{"pdf by default (no --format) to a terminal is refused", tty, nil, true},
		{"pdf with --out on a terminal goes on", tty, []string{"--format", "pdf", "--out", filepath.Join(t.TempDir(), "i.pdf")}, false},
		{"html to a terminal goes on", tty, []string{"--format", "html"}, false},
		{"pdf redirected to a file goes on", file, []string{"--format", "pdf"}, false},
	}
	// chargeback --format pdf likewise (csv is its default).
	cases = append(cases,
		ttyCase{"chargeback pdf to a terminal is refused", tty, []string{"chargeback", "--period", "2026-11", "--format", "pdf"}, true},
		ttyCase{"chargeback pdf redirected to a file goes on", file, []string{"chargeback", "--period", "2026-11", "--format", "pdf"}, false})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			args := append([]string{"--clickhouse", unreachable, "invoice", "render", "INV-1"}, tc.args...)
			if len(tc.args) > 0 && tc.args[0] == "chargeback" {
				args = append([]string{"--clickhouse", unreachable}, tc.args...)
			}
			code := run(context.Background(), args, tc.stdout, &stderr)
			refused := strings.Contains(stderr.String(), refusal)
			if refused != tc.refused || (tc.refused && (code != 2 || !strings.Contains(stderr.String(), "--out") || !strings.Contains(stderr.String(), "redirect"))) {
				t.Fatalf("exit %d, stderr %q; refused %v, want %v (exit 2 naming --out and redirect)", code, stderr.String(), refused, tc.refused)
			}
		})
	}
}
