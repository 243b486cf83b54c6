package config

// The environment variables gpumeter reads; they sit between the config
// file and flags in precedence.
const (
	EnvConfig     = "GPUMETER_CONFIG"
	EnvClickHouse = "GPUMETER_CLICKHOUSE"
	EnvLogLevel   = "GPUMETER_LOG_LEVEL"
	// EnvElectionIdentity overrides election.identity: replicas share one
	// config file (a ConfigMap) but each has its own address, e.g.
	// $(POD_IP):8443 in a pod spec.
	EnvElectionIdentity = "GPUMETER_ELECTION_IDENTITY"
)

// Env holds the settings given in the environment; empty means not set.
type Env struct {
	ConfigPath string
	ClickHouse string
	LogLevel   string
}

// FromEnv reads the environment through getenv (os.Getenv in the binary,
// a map in tests).
func FromEnv(getenv func(string) string) Env {
	return Env{ConfigPath: getenv(EnvConfig), ClickHouse: getenv(EnvClickHouse), LogLevel: getenv(EnvLogLevel)}
}
