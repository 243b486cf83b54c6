package store

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config says how to reach ClickHouse over the native protocol.
type Config struct {
	Addrs    []string // host:port of the native TCP endpoint, one or more
	Database string
	Username string
	Password Secret

	TLS                   bool
	TLSInsecureSkipVerify bool

	MaxOpenConns int
	MaxIdleConns int
	DialTimeout  time.Duration
	// QueryTimeout bounds every statement on the server side
	// (max_execution_time) and on the connection (read timeout).
	QueryTimeout time.Duration
	// Compress enables LZ4 block compression on the wire.
	Compress bool
}

// Secret is a string that never appears in logs.
type Secret string

// LogValue redacts the secret.
func (s Secret) LogValue() slog.Value {
	if s == "" {
		return slog.StringValue("")
	}
	return slog.StringValue("REDACTED")
}

// String redacts the secret in fmt output too.
func (s Secret) String() string { return s.LogValue().String() }

// DefaultConfig is a local server with the default database.
func DefaultConfig() Config {
	return Config{
		Addrs:        []string{"127.0.0.1:9000"},
		Database:     "default",
		Username:     "default",
		MaxOpenConns: 8,
		MaxIdleConns: 4,
		DialTimeout:  5 * time.Second,
		QueryTimeout: 5 * time.Minute,
		Compress:     true,
	}
}

// ParseDSN reads a DSN of the form
//
//	clickhouse://[user[:password]@]host:port[,host:port...][/database][?param=value...]
//
// with parameters secure (true/false), skip_verify, max_open_conns,
// max_idle_conns, dial_timeout, query_timeout (Go durations) and compress
// (lz4 or none). Unknown parameters are an error, so a typo is not ignored.
func ParseDSN(dsn string) (Config, error) {
	cfg := DefaultConfig()
	u, err := url.Parse(dsn)
	if err != nil {
		return Config{}, fmt.Errorf("parse clickhouse dsn: %w", redactURLError(err))
	}
	if u.Scheme != "clickhouse" && u.Scheme != "tcp" {
		return Config{}, fmt.Errorf("parse clickhouse dsn: scheme %q: want clickhouse:// (native protocol)", u.Scheme)
	}
	if u.Host == "" {
		return Config{}, errors.New("parse clickhouse dsn: missing host:port")
	}
	cfg.Addrs = nil
	for _, h := range strings.Split(u.Host, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, "9000")
		}
		cfg.Addrs = append(cfg.Addrs, h)
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		if p, ok := u.User.Password(); ok {
			cfg.Password = Secret(p)
		}
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		cfg.Database = db
	}
	var errs []error
	for key, vals := range u.Query() {
		v := vals[len(vals)-1]
		switch key {
		case "secure":
			cfg.TLS, err = strconv.ParseBool(v)
		case "skip_verify":
			cfg.TLSInsecureSkipVerify, err = strconv.ParseBool(v)
		case "max_open_conns":
			cfg.MaxOpenConns, err = strconv.Atoi(v)
		case "max_idle_conns":
			cfg.MaxIdleConns, err = strconv.Atoi(v)
		case "dial_timeout":
			cfg.DialTimeout, err = time.ParseDuration(v)
		case "query_timeout":
			cfg.QueryTimeout, err = time.ParseDuration(v)
		case "compress":
			switch v {
			case "lz4", "true", "1":
				cfg.Compress = true
			case "none", "false", "0":
				cfg.Compress = false
			default:
				err = fmt.Errorf("want lz4 or none")
			}
		default:
			err = errors.New("unknown parameter")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("parameter %s=%q: %w", key, v, err))
			err = nil
		}
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("parse clickhouse dsn: %w", errors.Join(errs...))
	}
	return cfg, cfg.Validate()
}

// redactURLError keeps url.Parse errors from echoing a password.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s", ue.Err)
	}
	return err
}

// Validate reports every problem with the config.
func (c Config) Validate() error {
	var errs []error
	if len(c.Addrs) == 0 {
		errs = append(errs, errors.New("addrs: at least one host:port"))
	}
	for i, a := range c.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("addrs[%d] %q: %w", i, a, err))
		} else if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("addrs[%d] %q: bad port", i, a))
		}
	}
	if !validIdentifier(c.Database) {
		errs = append(errs, fmt.Errorf("database %q: want letters, digits and underscores", c.Database))
	}
	if c.MaxOpenConns <= 0 {
		errs = append(errs, fmt.Errorf("max_open_conns %d: must be positive", c.MaxOpenConns))
	}
	if c.MaxIdleConns < 0 || c.MaxIdleConns > c.MaxOpenConns {
		errs = append(errs, fmt.Errorf("max_idle_conns %d: must be between 0 and max_open_conns", c.MaxIdleConns))
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, errors.New("dial_timeout: must be positive"))
	}
	if c.QueryTimeout < time.Second {
		errs = append(errs, errors.New("query_timeout: at least 1s"))
	}
	return errors.Join(errs...)
}

// validIdentifier accepts the database names we are willing to put into DDL,
// where ClickHouse takes no bind parameters.
func validIdentifier(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
