// Package config loads gpumeter's YAML config file. Precedence: the file,
// then environment variables, then flags (cmd/gpumeter applies the last two).
// Unknown keys are an error so that a typo never silently falls back to a
// default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/collectors/agent"
	"github.com/gpumeter/gpumeter/internal/admission"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/election"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/webhook"
)

// Config is the whole file. Sections grow with the features that need them.
type Config struct {
	ClickHouse ClickHouse               `yaml:"clickhouse"`
	Log        Log                      `yaml:"log"`
	Server     server.Config            `yaml:"server"`
	Rollup     rollup.Config            `yaml:"rollup"`
	Retention  rollup.RetentionConfig   `yaml:"retention"`
	Collector  agent.Settings           `yaml:"collector"`
	Billing    billing.Customers        `yaml:"billing"`
	Chargeback billing.ChargebackConfig `yaml:"chargeback"`
	Quotas     quota.Config             `yaml:"quotas"`
	Webhooks   webhook.Config           `yaml:"webhooks"`
	Kubernetes admission.Config         `yaml:"kubernetes"`
	Insights   insights.Config          `yaml:"insights"`
	Credits    credits.Settings         `yaml:"credits"`
	Reports    Reports                  `yaml:"reports"`
	// Election chooses the leader among server replicas (docs/ha.md).
	Election election.Config `yaml:"election"`
}

// ClickHouse says where usage is stored.
type ClickHouse struct {
	DSN string `yaml:"dsn"`
}

// Log configures structured logging.
type Log struct {
	Level string `yaml:"level"`
}

// Default is what applies without a file.
func Default() Config {
	return Config{
		ClickHouse: ClickHouse{DSN: "clickhouse://127.0.0.1:9000/default"},
		Log:        Log{Level: "info"},
		Server:     server.DefaultConfig(),
		Rollup:     rollup.DefaultConfig(),
		Retention:  rollup.DefaultRetentionConfig(),
		Billing:    billing.Customers{Schedule: billing.DefaultInvoiceSchedule},
		Chargeback: billing.DefaultChargebackConfig(),
		Quotas:     quota.DefaultConfig(),
		Webhooks:   webhook.DefaultConfig(),
		Kubernetes: admission.DefaultConfig(),
		Insights:   insights.DefaultConfig(),
		Collector:  agent.DefaultSettings(),
		Credits:    credits.DefaultSettings(),
		Election:   election.DefaultConfig(),
	}
}

// Load reads path over the defaults; an empty path means defaults only.
func Load(path string) (Config, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// An empty file (io.EOF) means all defaults.
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("parse config %s: %w", path, err)
	}
	// A second document would be ignored silently: refuse it.
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err == nil {
			return Config{}, fmt.Errorf("parse config %s: line %d: a second YAML document; the config is one document", path, extra.Line)
		}
		return Config{}, fmt.Errorf("parse config %s: %w", path, err)
	}
	cfg.Billing = cfg.Billing.RelativeTo(filepath.Dir(path))
	cfg.Chargeback = cfg.Chargeback.RelativeTo(filepath.Dir(path))
	cfg.Reports = cfg.Reports.RelativeTo(filepath.Dir(path))
	if id := os.Getenv(EnvElectionIdentity); id != "" {
		cfg.Election.Identity = id
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate names the field path of every problem.
func (c Config) Validate() error {
	var errs []error
	if c.ClickHouse.DSN == "" {
		errs = append(errs, errors.New("clickhouse.dsn: required"))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q: want debug, info, warn or error", c.Log.Level))
	}
	for _, err := range []error{c.Server.Validate(), c.Rollup.Validate(), c.Retention.Validate(),
		c.Collector.Validate(), c.Billing.Validate(),
		c.Chargeback.Validate(), c.Quotas.Validate(), c.Kubernetes.Validate(), c.Webhooks.Validate(), c.Insights.Validate(), c.Credits.Validate(), c.Election.Validate()} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
