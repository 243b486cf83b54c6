package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/internal/server/tlstest"
)

// serveTLS runs the server's routes behind tc on a loopback port and
// returns the address.
func serveTLS(t *testing.T, tc *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(DefaultConfig(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, tls.NewListener(ln, tc)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// handshake connects with client and returns the common name of the
// certificate the server presented.
func handshake(addr string, client *tls.Config) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, client)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// get asks for /healthz over client and returns the status.
func get(addr string, client *tls.Config) (int, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: client}}
	resp, err := c.Get("https://" + addr + "/healthz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestTLSVersions(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "server-1").Write(t, dir, "server")
	tc, err := TLSConfig{CertFile: cert, KeyFile: key}.Load(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, tc)
	for _, v := range []struct {
		name    string
		version uint16
		ok      bool
	}{{"TLS 1.0", tls.VersionTLS10, false}, {"TLS 1.1", tls.VersionTLS11, false}, {"TLS 1.2", tls.VersionTLS12, true}, {"TLS 1.3", tls.VersionTLS13, true}} {
		t.Run(v.name, func(t *testing.T) {
			client := &tls.Config{RootCAs: ca.Pool(), MinVersion: v.version, MaxVersion: v.version}
			code, err := get(addr, client)
			if v.ok && (err != nil || code != http.StatusOK) {
				t.Fatalf("GET /healthz over %s: %d, %v; want 200", v.name, code, err)
			}
			if !v.ok && err == nil {
				t.Fatalf("GET /healthz over %s: %d; want the handshake refused", v.name, code)
			}
		})
	}
	// Plain HTTP to the TLS port gets no API answer.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/healthz")
	if err == nil {
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP to the TLS listener answered 200")
		}
	}
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncLog is a log buffer handshakes may write to while the test reads.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}
func (l *syncLog) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.String() }

func TestTLSCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "server-1").Write(t, dir, "server")
	clock := &fakeClock{t: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}
	var log syncLog
	tc, err := TLSConfig{CertFile: cert, KeyFile: key}.load(slog.New(slog.NewTextHandler(&log, nil)), certCheckInterval, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, tc)
	client := &tls.Config{RootCAs: ca.Pool()}
	expect := func(step, want string) {
		t.Helper()
		got, err := handshake(addr, client)
		if err != nil || got != want {
			t.Fatalf("%s: handshake presented %q (%v); want %q", step, got, err, want)
		}
	}
	expect("before rotation", "server-1")

	// A new pair is written over the old files, as cert-manager or certbot
	// would; the modification time moves forward (a coarse file system may
	// keep the old second otherwise).
	writePair(t, ca.Server(t, "server-2"), cert, key, time.Now().Add(time.Second))
	expect("within the check interval", "server-1")
	clock.add(certCheckInterval)
	expect("after the check interval", "server-2")

	// A pair that does not load keeps the previous certificate and is
	// logged, once: it is not retried until a file moves again.
	if err := os.WriteFile(key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	touch(t, key, time.Now().Add(2*time.Second))
	clock.add(certCheckInterval)
	expect("after a bad key", "server-2")
	clock.add(certCheckInterval)
	expect("after a bad key, again", "server-2")
	if n := strings.Count(log.String(), "TLS certificate not reloaded"); n != 1 {
		t.Fatalf("%d errors logged for the bad key; want 1:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), key) {
		t.Fatalf("the error names no key file %s:\n%s", key, log.String())
	}

	// The files removed (a Secret mid-swap): still the last good one.
	os.Remove(cert)
	clock.add(certCheckInterval)
	expect("with the certificate file gone", "server-2")

	// A good pair again, finishing the rotation.
	writePair(t, ca.Server(t, "server-3"), cert, key, time.Now().Add(3*time.Second))
	clock.add(certCheckInterval)
	expect("after the repair", "server-3")
}

// TestTLSRotationSymlinkSwap rotates the way a Kubernetes Secret volume
// does: the files are symlinks through ..data, which is swapped for a new
// directory; the files' own names never change.
func TestTLSRotationSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	publish := func(name string, p tlstest.Pair) {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p.Write(t, d, "tls")
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish("..v1", ca.Server(t, "server-1"))
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	clock := &fakeClock{t: time.Now()}
	tc, err := TLSConfig{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}.load(slog.New(slog.DiscardHandler), certCheckInterval, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, tc)
	client := &tls.Config{RootCAs: ca.Pool()}
	if got, err := handshake(addr, client); err != nil || got != "server-1" {
		t.Fatalf("before the swap: %q, %v", got, err)
	}
	publish("..v2", ca.Server(t, "server-2"))
	// The new directory's files are new: their times differ from the old
	// ones on any file system that keeps nanoseconds; make sure on others.
	for _, f := range []string{"tls.crt", "tls.key"} {
		touch(t, filepath.Join(dir, "..v2", f), time.Now().Add(time.Second))
	}
	clock.add(certCheckInterval)
	if got, err := handshake(addr, client); err != nil || got != "server-2" {
		t.Fatalf("after the swap: %q, %v; want server-2", got, err)
	}
}

func writePair(t *testing.T, p tlstest.Pair, cert, key string, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(cert, p.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, p.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	touch(t, cert, mod)
	touch(t, key, mod)
}

func touch(t *testing.T, path string, mod time.Time) {
	t.Helper()
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

func TestTLSClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "server CA")
	clientCA := tlstest.NewCA(t, "client CA")
	otherCA := tlstest.NewCA(t, "another CA")
	cert, key := ca.Server(t, "server").Write(t, dir, "server")
	caFile := filepath.Join(dir, "clients.pem")
	clientCA.WriteCA(t, caFile)
	pair := func(ca *tlstest.CA, cn string) tls.Certificate {
		p := ca.Client(t, cn)
		c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fromCA, fromOther := pair(clientCA, "apiserver"), pair(otherCA, "intruder")
	for _, mode := range []string{ClientAuthRequire, ClientAuthVerifyIfGiven} {
		t.Run(mode, func(t *testing.T) {
			tc, err := TLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: caFile, ClientAuth: mode}.Load(slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			addr := serveTLS(t, tc)
			for _, c := range []struct {
				name  string
				certs []tls.Certificate
				ok    bool
			}{
				{"no client certificate", nil, mode == ClientAuthVerifyIfGiven},
				{"a certificate from the client CA", []tls.Certificate{fromCA}, true},
				{"a certificate from another CA", []tls.Certificate{fromOther}, false},
			} {
				for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
					// The client sends its certificate even when the server's
					// list of acceptable CAs does not name its issuer (Go's
					// client would otherwise send none), so the server's
					// own check is what refuses it.
					client := &tls.Config{RootCAs: ca.Pool(), MaxVersion: v,
						GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
							if len(c.certs) == 0 {
								return &tls.Certificate{}, nil
							}
							return &c.certs[0], nil
						}}
					// TLS 1.3 clients finish their side of the handshake
					// before the server checks the certificate: the refusal
					// shows on the first request, so ask for one.
					code, err := get(addr, client)
					if c.ok && (err != nil || code != http.StatusOK) {
						t.Errorf("%s, TLS %x: %d, %v; want 200", c.name, v, code, err)
					}
					if !c.ok && err == nil {
						t.Errorf("%s, TLS %x: %d; want refused", c.name, v, code)
					}
				}
			}
		})
	}
}

func TestTLSLoadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "server").Write(t, dir, "server")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o644); err != nil {
		t.Fatal(err)
	}
	otherCert, _ := ca.Server(t, "other").Write(t, dir, "other")
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name string
		cfg  TLSConfig
		want []string
	}{
		{"missing cert", TLSConfig{CertFile: missing, KeyFile: key}, []string{"server.tls.cert_file", missing}},
		{"missing key", TLSConfig{CertFile: cert, KeyFile: missing}, []string{"server.tls.key_file", missing}},
		{"garbage cert", TLSConfig{CertFile: garbage, KeyFile: key}, []string{garbage}},
		{"key of another certificate", TLSConfig{CertFile: otherCert, KeyFile: key}, []string{otherCert, key}},
		{"missing client CA", TLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: missing}, []string{"server.tls.client_ca_file", missing}},
		{"garbage client CA", TLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: garbage}, []string{"server.tls.client_ca_file", garbage}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.cfg.Load(slog.New(slog.DiscardHandler))
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestTLSConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		tls  TLSConfig
		want string
	}{
		{"none", TLSConfig{}, ""},
		{"pair", TLSConfig{CertFile: "c", KeyFile: "k"}, ""},
		{"client CA", TLSConfig{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}, ""},
		{"verify if given", TLSConfig{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "verify_if_given"}, ""},
		{"cert alone", TLSConfig{CertFile: "c"}, "give both or neither"},
		{"key alone", TLSConfig{KeyFile: "k"}, "give both or neither"},
		{"client CA without a pair", TLSConfig{ClientCAFile: "ca"}, "needs cert_file and key_file"},
		{"client_auth without a CA", TLSConfig{CertFile: "c", KeyFile: "k", ClientAuth: "require"}, "needs client_ca_file"},
		{"unknown client_auth", TLSConfig{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientAuth: "optional"}, `client_auth "optional"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.TLS = c.tls
			err := cfg.Validate()
			if c.want == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("error %v; want one saying %q", err, c.want)
			}
		})
	}
}

func TestRequireTransportAndPlainHTTPWarning(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.RequireTransport(); err == nil || !strings.Contains(err.Error(), "--plain-http") || !strings.Contains(err.Error(), "--tls-cert") {
		t.Fatalf("no TLS, no plain_http: %v; want a refusal naming --tls-cert and --plain-http", err)
	}
	cfg.PlainHTTP = true
	if err := cfg.RequireTransport(); err != nil {
		t.Fatalf("plain_http: %v", err)
	}
	cfg.TLS = TLSConfig{CertFile: "c", KeyFile: "k"}
	if err := cfg.RequireTransport(); err == nil {
		t.Fatal("TLS and plain_http both: accepted")
	}
	cfg.PlainHTTP = false
	if err := cfg.RequireTransport(); err != nil {
		t.Fatalf("TLS: %v", err)
	}
	for addr, warn := range map[string]bool{
		"127.0.0.1:8080": false, "[::1]:8080": false, "localhost:8080": false, "127.0.0.2:0": false,
		"0.0.0.0:8080": true, ":8080": true, "[::]:8080": true, "10.0.0.5:8080": true, "gpumeter.example.com:8080": true,
	} {
		plain := DefaultConfig()
		plain.PlainHTTP = true
		if got := plain.PlainHTTPWarning(addr) != ""; got != warn {
			t.Errorf("plain HTTP on %s: warning %v; want %v", addr, got, warn)
		}
		if DefaultConfig().PlainHTTPWarning(addr) != "" {
			t.Errorf("TLS on %s: warned", addr)
		}
	}
}
