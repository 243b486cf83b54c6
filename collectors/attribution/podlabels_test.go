package attribution

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func TestKubeletPodsReadsLabelsWithTokenAndCaches(t *testing.T) {
	var requests atomic.Int32
	var fail atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if fail.Load() {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		w.Write([]byte(`{"kind":"PodList","items":[
			{"metadata":{"name":"train-0","namespace":"ml","uid":"u1","labels":{"team":"vision","app":"train"}}},
			{"metadata":{"name":"web","namespace":"default"}}]}`))
	}))
	defer srv.Close()
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("s3cret\n"), 0o600)
	cfg := DefaultPodLabelsConfig()
	cfg.URL, cfg.TokenFile, cfg.InsecureSkipVerify = srv.URL+"/pods", token, true
	k, err := NewKubeletPods(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	k.now = func() time.Time { return now }

	if l, ok := k.PodLabels("ml", "train-0"); !ok || l["team"] != "vision" {
		t.Fatalf("labels = %v, %v", l, ok)
	}
	if _, ok := k.PodLabels("default", "web"); !ok {
		t.Fatal("a pod without labels is still a known pod")
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d requests, want one list reused", n)
	}
	// An unknown pod refreshes at most once a second.
	k.PodLabels("ml", "new-pod")
	k.PodLabels("ml", "new-pod")
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d requests within the first second", n)
	}
	now = now.Add(2 * time.Second)
	k.PodLabels("ml", "new-pod")
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests, want a refresh for an unknown pod after a second", n)
	}
	// A failing kubelet keeps the last good list.
	fail.Store(true)
	now = now.Add(time.Minute)
	if l, ok := k.PodLabels("ml", "train-0"); !ok || l["team"] != "vision" {
		t.Fatalf("after a failed refresh: %v, %v", l, ok)
	}
}

func TestPodLabelsConfigValidate(t *testing.T) {
	for name, cfg := range map[string]PodLabelsConfig{
		"no url":       {Refresh: time.Second, Timeout: time.Second},
		"not http":     {URL: "unix:///var/run/kubelet.sock", Refresh: time.Second, Timeout: time.Second},
		"tiny refresh": {URL: "https://127.0.0.1:10250/pods", Refresh: time.Millisecond, Timeout: time.Second},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
