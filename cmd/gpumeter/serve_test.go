package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServeAnswersHealthReadinessAndMetrics(t *testing.T) {
	dsn := testDSN(t)
	addr := freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--clickhouse", dsn, "serve", "--listen", addr}, io.Discard, &stderr)
	}()

	get := func(path string) (int, string) { return httpGet(addr, path) }
	eventually(t, "serve to listen", 30*time.Second, func() bool { code, _ := get("/healthz"); return code == 200 })
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, "ready") {
		t.Errorf("/readyz = %d %s", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics = %d, no runtime metrics", code)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop after its context ended")
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpGet returns the status and body of GET path, or 0 and the error.
func httpGet(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
