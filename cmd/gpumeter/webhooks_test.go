package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/webhook"
)

// Finalized invoices reach a receiver that fails its first attempts:
// signed, retried, every attempt recorded; list shows them delivered and
// replay sends one again.
func TestWebhooksDeliverFinalizedInvoices(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	const secret = "receiver-shared-secret-123"
	var mu sync.Mutex
	var got []webhook.Event
	calls := 0
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]byte(secret), r.Header.Get(webhook.SignatureHeader), body, time.Now(), time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		var ev webhook.Event
		_ = json.Unmarshal(body, &ev)
		got = append(got, ev)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("webhooks:\n  backoff_initial: 20ms\n  backoff_max: 100ms\n  poll: 100ms\n  endpoints:\n" +
		"    - {name: erp, url: " + recv.URL + ", secret: " + secret + ", events: [invoice.finalized]}\n")
	f.Close()
	g := []string{"--clickhouse", dsn, "--config", cfg}
	if code, out, stderr := gpumeter(t, append(g, "invoice", "run", "--period", "2026-10", "--quiet")...); code != 0 {
		t.Fatalf("invoice run: %s %s", out, stderr)
	}
	code, out, _ := gpumeter(t, append(g, "webhooks", "list")...)
	if code != 0 || strings.Count(out, "erp: pending (0 attempts)") != 3 {
		t.Fatalf("before serve: %s", out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var serveErr syncBuffer
	go func() {
		done <- run(ctx, append(g, "--log-level", "warn", "serve", "--plain-http", "--metrics-listen", "127.0.0.1:0", "--audit-queue", t.TempDir(), "--listen", "127.0.0.1:0"), io.Discard, &serveErr) // port 0: no race for a free port
	}()
	eventually(t, "three deliveries", 90*time.Second, func() bool {
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before delivering: %s", code, serveErr.String())
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 3
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exit %d: %s", code, serveErr.String())
	}
	numbers := map[string]bool{}
	for _, ev := range got {
		var data struct{ Number string }
		_ = json.Unmarshal(ev.Data, &data)
		if ev.Type != webhook.TypeInvoiceFinalized || !strings.HasPrefix(data.Number, "GC-") {
			t.Errorf("event %+v", ev)
		}
		numbers[data.Number] = true
	}
	if len(numbers) != 3 {
		t.Errorf("numbers %v, want three distinct", numbers)
	}
	code, out, _ = gpumeter(t, append(g, "webhooks", "list")...)
	if code != 0 || strings.Count(out, "erp: delivered") != 3 || !strings.Contains(out, "delivered (3 attempts)") {
		t.Fatalf("after serve: %s", out)
	}
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	code, out, stderr := gpumeter(t, append(g, "webhooks", "replay", id)...)
	if code != 0 || !strings.Contains(out, "delivered "+id+" to erp") {
		t.Fatalf("replay: %d %s %s", code, out, stderr)
	}
	mu.Lock()
	if len(got) != 4 || got[3].ID != id {
		t.Errorf("after replay the receiver has %d events", len(got))
	}
	mu.Unlock()
	if code, _, _ := gpumeter(t, append(g, "webhooks", "replay", "evt_nosuch")...); code != 2 {
		t.Errorf("replaying an unknown event: exit %d, want 2", code)
	}
}

// syncBuffer is a strings.Builder safe for the serve goroutine to write.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
