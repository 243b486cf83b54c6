package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/gpumeter/gpumeter/internal/certreload"
)

// TLSConfig is the API listener's TLS: a PEM certificate (chain) and key,
// re-read when either file changes, and optionally a CA that client
// certificates must chain to.
type TLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile turns on client certificates: ClientAuth says whether a
	// client must present one (require) or only may (verify_if_given);
	// either way one presented must chain to this CA. Read once at start.
	ClientCAFile string `yaml:"client_ca_file"`
	ClientAuth   string `yaml:"client_auth"`
}

// Client-certificate policies of server.tls.client_auth.
const (
	ClientAuthRequire       = "require"
	ClientAuthVerifyIfGiven = "verify_if_given"
)

// certCheckInterval bounds how often a handshake stats the certificate and
// key files.
const certCheckInterval = certreload.CheckInterval

// Enabled reports whether TLS is configured.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// validate reports the section's problems of shape; the files are read by
// Load.
func (c TLSConfig) validate() []error {
	var errs []error
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, fmt.Errorf("server.tls: cert_file %q and key_file %q: give both or neither", c.CertFile, c.KeyFile))
	}
	switch c.ClientAuth {
	case "", ClientAuthRequire, ClientAuthVerifyIfGiven:
	default:
		errs = append(errs, fmt.Errorf("server.tls.client_auth %q: want %s or %s", c.ClientAuth, ClientAuthRequire, ClientAuthVerifyIfGiven))
	}
	if c.ClientCAFile != "" && !c.Enabled() {
		errs = append(errs, fmt.Errorf("server.tls.client_ca_file %q: needs cert_file and key_file", c.ClientCAFile))
	}
	if c.ClientAuth != "" && c.ClientCAFile == "" {
		errs = append(errs, fmt.Errorf("server.tls.client_auth %q: needs client_ca_file, the CA client certificates are checked against", c.ClientAuth))
	}
	return errs
}

// RequireTransport is serve's check that the API listener's transport was
// chosen: TLS files, or plain HTTP asked for by name. The collector's
// listener and the other commands do not call it.
func (c Config) RequireTransport() error {
	switch {
	case c.TLS.Enabled() && c.PlainHTTP:
		return errors.New("server.tls (--tls-cert, --tls-key) and server.plain_http (--plain-http) are both set: choose one")
	case !c.TLS.Enabled() && !c.PlainHTTP:
		return errors.New("serve speaks TLS unless told otherwise: give a PEM certificate and key (--tls-cert and --tls-key, or server.tls.cert_file and server.tls.key_file), or pass --plain-http (server.plain_http: true) to serve plain HTTP, e.g. on loopback behind a proxy that terminates TLS")
	}
	return nil
}

// PlainHTTPWarning is the warning serve logs when it listens in plain
// HTTP on an address other hosts reach; empty when none is due.
func (c Config) PlainHTTPWarning(addr string) string {
	if !c.PlainHTTP {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if host == "localhost" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	return "plain HTTP on a non-loopback address: API keys and admission reviews cross the network unencrypted; configure server.tls (--tls-cert, --tls-key) or listen on loopback behind a TLS proxy"
}

// Load reads the certificate, the key and the client CA, and returns the
// listener's TLS settings: TLS 1.2 or newer, the certificate re-read when
// its files change (a bad new pair is logged and the old one kept). An
// error names the file at fault.
func (c TLSConfig) Load(logger *slog.Logger) (*tls.Config, error) {
	return c.load(logger, certCheckInterval, time.Now)
}

func (c TLSConfig) load(logger *slog.Logger, interval time.Duration, now func() time.Time) (*tls.Config, error) {
	pair, err := certreload.New("server.tls", c.CertFile, c.KeyFile, interval, now, logger)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: pair.GetCertificate,
		// serve's http.Server is handed a TLS listener, which offers no
		// HTTP/2; say so rather than let a client guess.
		NextProtos: []string{"http/1.1"},
	}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server.tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server.tls.client_ca_file %s: no PEM certificate in it", c.ClientCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		if c.ClientAuth == ClientAuthVerifyIfGiven {
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return tc, nil
}
