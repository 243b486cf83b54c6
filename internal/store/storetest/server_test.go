package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store"
)

func TestPrivateServerStopsAndStarts(t *testing.T) {
	srv := StartServer(t)
	cfg, err := store.ParseDSN(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialTimeout = time.Second
	ctx := context.Background()
	s, err := store.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, step := range []struct {
		server string
		do     func()
		up     bool
	}{
		{"stopped", srv.Stop, false},
		{"restarted", srv.Start, true},
		{"killed", srv.Kill, false},
		{"restarted from SIGKILL", srv.Start, true},
	} {
		step.do()
		if err := s.Ping(ctx); (err == nil) != step.up {
			t.Fatalf("server %s: ping error %v, want it up %v", step.server, err, step.up)
		}
	}
}
