package config

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/election"
)

func TestLoadElection(t *testing.T) {
	cfg, err := Load(write(t, "election:\n  backend: zookeeper\n  identity: 10.0.0.5:8080\n"+
		"  zookeeper:\n    servers: [zk-0:2181, zk-1:2181, zk-2:2181]\n    session_timeout: 6s\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Election
	if e.Backend != election.BackendZooKeeper || e.Name != "gpumeter" || e.Identity != "10.0.0.5:8080" ||
		len(e.ZooKeeper.Servers) != 3 || e.ZooKeeper.SessionTimeout != 6*time.Second || e.ZooKeeper.Root != "/gpumeter/election" {
		t.Fatalf("election section: %+v", e)
	}
	if cfg, err := Load(write(t, "")); err != nil || cfg.Election.Backend != election.BackendNone {
		t.Fatalf("no election section: backend %q, %v; want a single replica", cfg.Election.Backend, err)
	}
	for name, body := range map[string]string{
		"unknown key":   "election:\n  backend: zookeeper\n  identity: a:1\n  zookeeper:\n    server: [zk:2181]\n",
		"renew > lease": "election:\n  backend: kubernetes\n  identity: a:1\n  kubernetes:\n    namespace: g\n    renew_deadline: 20s\n",
	} {
		if _, err := Load(write(t, body)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name != "unknown key" && !strings.Contains(err.Error(), "election.") {
			t.Errorf("%s: %v does not name the election field", name, err)
		}
	}
}

// Replicas share one config file; GPUMETER_ELECTION_IDENTITY gives each
// its own identity, and is validated like the file's.
func TestElectionIdentityFromTheEnvironment(t *testing.T) {
	path := write(t, "election:\n  backend: zookeeper\n  zookeeper:\n    servers: [zk-0:2181]\n")
	// The collector and migrate read the file too: only serve needs the
	// identity (RequireIdentity).
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("no identity anywhere: %v, want the file loaded", err)
	}
	if err := cfg.Election.RequireIdentity(); err == nil || !strings.Contains(err.Error(), "election.identity") {
		t.Fatalf("no identity anywhere: %v, want election.identity required by serve", err)
	}
	t.Setenv(EnvElectionIdentity, "10.0.3.7:8443")
	cfg, err = Load(path)
	if err != nil || cfg.Election.Identity != "10.0.3.7:8443" {
		t.Fatalf("identity from the environment: %q, %v", cfg.Election.Identity, err)
	}
	t.Setenv(EnvElectionIdentity, "10.0.3.7")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "election.identity") {
		t.Errorf("identity without a port from the environment: %v, want refused", err)
	}
}
