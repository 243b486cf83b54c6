package election

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsASingleReplica(t *testing.T) {
	c := DefaultConfig()
	if c.Backend != BackendNone {
		t.Fatalf("default backend %q, want none", c.Backend)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("default config refused: %v", err)
	}
	// The defaults of each backend are valid once it is chosen.
	zk := c
	zk.Backend, zk.Identity, zk.ZooKeeper.Servers = BackendZooKeeper, "10.0.0.1:8080", []string{"zk-0:2181", "zk-1:2181"}
	if err := zk.Validate(); err != nil {
		t.Fatalf("zookeeper with defaults: %v", err)
	}
	k8s := c
	k8s.Backend, k8s.Identity, k8s.Kubernetes.Namespace = BackendKubernetes, "10.0.0.1:8443", "gpumeter"
	if err := k8s.Validate(); err != nil {
		t.Fatalf("kubernetes with defaults: %v", err)
	}
}

func TestIdentityOnlyServeRequires(t *testing.T) {
	c := DefaultConfig()
	c.Backend, c.ZooKeeper.Servers = BackendZooKeeper, []string{"zk-0:2181"}
	if err := c.Validate(); err != nil {
		t.Fatalf("a config without identity loads (the collector reads it too): %v", err)
	}
	if err := c.RequireIdentity(); err == nil || !strings.Contains(err.Error(), "election.identity: required") {
		t.Fatalf("serve's check: %v", err)
	}
	c.Identity = "10.0.0.1:8443"
	if err := c.RequireIdentity(); err != nil {
		t.Fatal(err)
	}
	if err := DefaultConfig().RequireIdentity(); err != nil {
		t.Fatalf("no election: %v", err)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	zk := DefaultConfig()
	zk.Backend, zk.Identity, zk.ZooKeeper.Servers = BackendZooKeeper, "10.0.0.1:8080", []string{"zk-0:2181"}
	k8s := DefaultConfig()
	k8s.Backend, k8s.Identity, k8s.Kubernetes.Namespace = BackendKubernetes, "10.0.0.1:8443", "gpumeter"
	cases := []struct {
		name   string
		base   Config
		mutate func(*Config)
		want   string
	}{
		{"unknown backend", zk, func(c *Config) { c.Backend = "etcd" }, "election.backend"},
		{"identity without port", zk, func(c *Config) { c.Identity = "pod-0" }, "election.identity"},
		{"client cert without key", zk, func(c *Config) { c.Forward.CertFile = "/etc/gpumeter/forward.crt" }, "election.forward.cert_file/key_file"},
		{"bad name", zk, func(c *Config) { c.Name = "GPU meter" }, "election.name"},
		{"no servers", zk, func(c *Config) { c.ZooKeeper.Servers = nil }, "election.zookeeper.servers"},
		{"server without port", zk, func(c *Config) { c.ZooKeeper.Servers = []string{"zk-0"} }, "election.zookeeper.servers[0]"},
		{"short session", zk, func(c *Config) { c.ZooKeeper.SessionTimeout = 500 * time.Millisecond }, "election.zookeeper.session_timeout"},
		{"relative root", zk, func(c *Config) { c.ZooKeeper.Root = "gpumeter" }, "election.zookeeper.root"},
		{"no namespace", k8s, func(c *Config) { c.Kubernetes.Namespace = "" }, "election.kubernetes.namespace"},
		{"renew after lease", k8s, func(c *Config) { c.Kubernetes.RenewDeadline = 20 * time.Second }, "renew deadline"},
		{"fractional lease", k8s, func(c *Config) { c.Kubernetes.LeaseDuration = 15500 * time.Millisecond }, "lease duration"},
	}
	for _, tc := range cases {
		c := tc.base
		c.ZooKeeper.Servers = append([]string(nil), c.ZooKeeper.Servers...)
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	// A backend not chosen is not checked: a half-filled kubernetes
	// section does not stop a ZooKeeper deployment.
	zk.Kubernetes = KubernetesConfig{}
	if err := zk.Validate(); err != nil {
		t.Fatalf("zookeeper with an empty kubernetes section: %v", err)
	}
}

func TestFromConfigRefuses(t *testing.T) {
	if _, err := FromConfig(DefaultConfig(), nil); err == nil {
		t.Error("built an elector for a single replica")
	}
	bad := DefaultConfig()
	bad.Backend = BackendZooKeeper
	if _, err := FromConfig(bad, nil); err == nil || !strings.Contains(err.Error(), "election.identity") {
		t.Errorf("invalid config: %v, want the validation error", err)
	}
	// Outside a pod there are no in-cluster credentials: a clear error.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	k8s := DefaultConfig()
	k8s.Backend, k8s.Identity, k8s.Kubernetes.Namespace = BackendKubernetes, "10.0.0.1:8443", "gpumeter"
	if _, err := FromConfig(k8s, nil); err == nil || !strings.Contains(err.Error(), "election.backend kubernetes") {
		t.Errorf("kubernetes outside a cluster: %v", err)
	}
}

// An election is refused where every client must present a certificate
// and the followers have none to forward with; allowed where they have
// one, where a certificate is only checked when given, or without an
// election.
func TestCheckClientAuth(t *testing.T) {
	k8s := DefaultConfig()
	k8s.Backend = BackendKubernetes
	if err := k8s.CheckClientAuth(true); err == nil || !strings.Contains(err.Error(), "client_auth: verify_if_given") {
		t.Errorf("an election with client certificates required: %v, want a refusal naming verify_if_given", err)
	}
	if err := k8s.CheckClientAuth(false); err != nil {
		t.Errorf("an election with client certificates optional: %v", err)
	}
	if err := DefaultConfig().CheckClientAuth(true); err != nil {
		t.Errorf("a single replica with client certificates required: %v", err)
	}
	k8s.Forward.CertFile, k8s.Forward.KeyFile = "/etc/gpumeter/forward.crt", "/etc/gpumeter/forward.key"
	if err := k8s.CheckClientAuth(true); err != nil {
		t.Errorf("an election whose followers present a certificate: %v", err)
	}
}
