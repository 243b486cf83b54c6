package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
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
// key files: rotation is seen within it, and a busy listener does not stat
// twice per connection.
const certCheckInterval = 2 * time.Second

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
	r, err := newCertReloader(c.CertFile, c.KeyFile, interval, now, logger)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.GetCertificate,
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

// fileStamp tells whether a file changed: Kubernetes swaps a Secret's
// files by a symlink, cert-manager and certbot rewrite them; either moves
// the modification time or the size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// certReloader holds the serving certificate and re-reads its files, at
// most once per interval, when their stamps change.
type certReloader struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time
	logger            *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamps  [2]fileStamp // of the pair last tried, loaded or not
	checked time.Time
}

func newCertReloader(certFile, keyFile string, interval time.Duration, now func() time.Time, logger *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, interval: interval, now: now, logger: logger}
	stamps, err := r.stamps2()
	if err != nil {
		return nil, err
	}
	cert, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cert, r.stamps, r.checked = cert, stamps, now()
	return r, nil
}

func (r *certReloader) stamps2() ([2]fileStamp, error) {
	cs, err := stampOf(r.certFile)
	if err != nil {
		return [2]fileStamp{}, fmt.Errorf("server.tls.cert_file: %w", err)
	}
	ks, err := stampOf(r.keyFile)
	if err != nil {
		return [2]fileStamp{}, fmt.Errorf("server.tls.key_file: %w", err)
	}
	return [2]fileStamp{cs, ks}, nil
}

// load reads the pair; its error names both files, since a mismatch
// between them is a fault of neither alone.
func (r *certReloader) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls: certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
			cert.Leaf = leaf
		}
	}
	return &cert, nil
}

// GetCertificate is tls.Config's: the current certificate, re-read first
// if its files changed since they were last tried.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < r.interval {
		return r.cert, nil
	}
	r.checked = now
	stamps, err := r.stamps2()
	if err != nil {
		r.logger.Error("TLS certificate not reloaded; serving the previous one", "err", err)
		return r.cert, nil
	}
	if stamps == r.stamps {
		return r.cert, nil
	}
	// Remembered even when the pair fails, so that a half-written rotation
	// is retried when a file moves again, not logged on every handshake.
	r.stamps = stamps
	cert, err := r.load()
	if err != nil {
		r.logger.Error("TLS certificate not reloaded; serving the previous one", "err", err)
		return r.cert, nil
	}
	r.cert = cert
	attrs := []any{"cert_file", r.certFile}
	if cert.Leaf != nil {
		attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	}
	r.logger.Info("TLS certificate reloaded", attrs...)
	return r.cert, nil
}
