package election

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
)

// Backends an election can run on.
const (
	BackendNone       = ""           // one replica: no election, it leads alone
	BackendZooKeeper  = "zookeeper"  // ZooKeeper or ClickHouse Keeper
	BackendKubernetes = "kubernetes" // a coordination.k8s.io Lease
)

// Config is the election section of the config file (docs/ha.md).
type Config struct {
	// Backend: "" (a single replica), "zookeeper" or "kubernetes".
	Backend string `yaml:"backend"`
	// Name of the election (the Lease's name, or the znode under Root):
	// the replicas of one deployment share it.
	Name string `yaml:"name"`
	// Identity is this replica's host:port as the other replicas reach it
	// (where they forward admissions); each replica has its own.
	Identity string `yaml:"identity"`
	// Forward says how followers check the leader's certificate when
	// they forward admissions to it over TLS.
	Forward    ForwardConfig    `yaml:"forward"`
	ZooKeeper  ZooKeeperConfig  `yaml:"zookeeper"`
	Kubernetes KubernetesConfig `yaml:"kubernetes"`
}

// ForwardConfig is how a follower checks the leader's certificate (serve
// forwards over HTTPS when its own listener speaks TLS).
type ForwardConfig struct {
	// CAFile verifies the leader's certificate; empty: the system roots.
	CAFile string `yaml:"ca_file"`
	// ServerName the leader's certificate must carry; empty: the host of
	// its identity (replicas reached by pod IP often share a certificate
	// for the Service's DNS name: name it here).
	ServerName string `yaml:"server_name"`
	// CertFile and KeyFile are the client certificate a follower presents
	// when the leader's listener requires one (server.tls.client_ca_file
	// with client_auth require); both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// RequireIdentity refuses an election without this replica's identity:
// serve cannot stand without telling the others where to forward.
func (c Config) RequireIdentity() error {
	if c.Backend == BackendNone || c.Identity != "" {
		return nil
	}
	return errors.New("election.identity: required: this replica's host:port as the other replicas reach it " +
		"(or GPUMETER_ELECTION_IDENTITY)")
}

// CheckClientAuth refuses an election whose replicas require client
// certificates of every client (server.tls.client_ca_file without
// client_auth verify_if_given) while the followers have none to present
// (election.forward.cert_file): the leader's listener would refuse every
// forwarded admission. verify_if_given checks a certificate when one is
// given and lets the forward in, authenticated by the caller's key as any
// request is (docs/ha.md).
func (c Config) CheckClientAuth(serverRequiresClientCert bool) error {
	if c.Backend == BackendNone || !serverRequiresClientCert || c.Forward.CertFile != "" {
		return nil
	}
	return errors.New("election: the replicas forward admissions to the leader, whose listener requires a client certificate " +
		"(server.tls.client_ca_file, --tls-client-ca): give the followers one (election.forward.cert_file and key_file) " +
		"or set server.tls.client_auth: verify_if_given")
}

// ZooKeeperConfig says where the ensemble is and how long a session lasts.
type ZooKeeperConfig struct {
	Servers []string `yaml:"servers"`
	// SessionTimeout bounds a failover: the leader steps down after 2/3 of
	// it without the ensemble, a successor starts after all of it.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	Root           string        `yaml:"root"`
}

// KubernetesConfig places the Lease and times it (client-go's meanings).
type KubernetesConfig struct {
	Namespace     string        `yaml:"namespace"`
	LeaseDuration time.Duration `yaml:"lease_duration"`
	RenewDeadline time.Duration `yaml:"renew_deadline"`
	RetryPeriod   time.Duration `yaml:"retry_period"`
}

// DefaultConfig is a single replica; the timings apply once a backend is
// chosen: a 10 s ZooKeeper session, and client-go's defaults for the
// Lease (15 s, 10 s, 2 s, as kube-scheduler uses).
func DefaultConfig() Config {
	return Config{
		Name: "gpumeter",
		ZooKeeper: ZooKeeperConfig{
			SessionTimeout: 10 * time.Second,
			Root:           DefaultZooKeeperRoot,
		},
		Kubernetes: KubernetesConfig{
			LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second,
			RetryPeriod:   2 * time.Second,
		},
	}
}

// Validate names the field path of every problem. The backend's own
// section is checked only when that backend is chosen.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch c.Backend {
	case BackendNone:
		return nil
	case BackendZooKeeper, BackendKubernetes:
	default:
		add("election.backend %q: want zookeeper, kubernetes, or nothing for a single replica", c.Backend)
		return errors.Join(errs...)
	}
	if (c.Forward.CertFile == "") != (c.Forward.KeyFile == "") {
		add("election.forward.cert_file/key_file: both or neither")
	}
	if err := validateName(c.Name); err != nil {
		add("election.name: %v", err)
	}
	// Only serve stands for election, so only serve requires the identity
	// (RequireIdentity): the collector and migrate read the same file.
	if c.Identity != "" {
		if err := ValidateIdentity(c.Identity); err != nil {
			add("election.identity: %v", err)
		}
	}
	switch c.Backend {
	case BackendZooKeeper:
		z := c.ZooKeeper
		if len(z.Servers) == 0 {
			add("election.zookeeper.servers: required (host:port of each ensemble member)")
		}
		for i, s := range z.Servers {
			if err := ValidateIdentity(s); err != nil {
				add("election.zookeeper.servers[%d]: %v", i, err)
			}
		}
		// ZooKeeper grants 2–20 ticks; below a second the leader would
		// step down at every hiccup.
		if z.SessionTimeout < time.Second {
			add("election.zookeeper.session_timeout %s: at least 1s", z.SessionTimeout)
		}
		if !strings.HasPrefix(z.Root, "/") || strings.HasSuffix(z.Root, "/") {
			add("election.zookeeper.root %q: an absolute path without a trailing slash", z.Root)
		}
	case BackendKubernetes:
		k := c.Kubernetes
		if k.Namespace == "" {
			add("election.kubernetes.namespace: required (where the Lease lives)")
		}
		if err := validateLeaseTimes(k.LeaseDuration, k.RenewDeadline, k.RetryPeriod); err != nil {
			add("election.kubernetes: %v", err)
		}
	}
	return errors.Join(errs...)
}

// FromConfig builds the elector the config chooses; the caller checks
// for BackendNone first (a single replica runs no election). The
// Kubernetes backend uses the pod's in-cluster credentials: its service
// account needs get, create and update on leases in the namespace.
func FromConfig(c Config, log *slog.Logger) (Elector, error) {
	return FromConfigWith(c, nil, log)
}

// FromConfigWith is FromConfig with the Kubernetes backend's Lease client
// given (tests pass a fake API server's); nil: the pod's in-cluster
// credentials. The ZooKeeper backend ignores it.
func FromConfigWith(c Config, leases coordinationclient.CoordinationV1Interface, log *slog.Logger) (Elector, error) {
	if err := errors.Join(c.Validate(), c.RequireIdentity()); err != nil {
		return nil, err
	}
	switch c.Backend {
	case BackendZooKeeper:
		return NewZooKeeper(ZooKeeperOptions{
			Servers: c.ZooKeeper.Servers, SessionTimeout: c.ZooKeeper.SessionTimeout, Root: c.ZooKeeper.Root,
			Name: c.Name, Identity: c.Identity, Logger: log,
		})
	case BackendKubernetes:
		if leases == nil {
			rc, err := rest.InClusterConfig()
			if err != nil {
				return nil, fmt.Errorf("election.backend kubernetes: %w", err)
			}
			if leases, err = coordinationclient.NewForConfig(rc); err != nil {
				return nil, fmt.Errorf("election.backend kubernetes: %w", err)
			}
		}
		return NewKubernetes(KubernetesOptions{
			Client: leases, Namespace: c.Kubernetes.Namespace, Name: c.Name, Identity: c.Identity,
			LeaseDuration: c.Kubernetes.LeaseDuration, RenewDeadline: c.Kubernetes.RenewDeadline,
			RetryPeriod: c.Kubernetes.RetryPeriod, Logger: log,
		})
	default:
		return nil, errors.New("election.backend: none chosen: a single replica runs no election")
	}
}
