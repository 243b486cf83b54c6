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
	srv.Stop()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("ping succeeded with the server stopped")
	}
	srv.Start()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
	srv.Kill()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("ping succeeded with the server killed")
	}
	srv.Start()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping after a restart from SIGKILL: %v", err)
	}
}
