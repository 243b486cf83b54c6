package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/server/tlstest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// serve over TLS with client certificates required, against a real
// ClickHouse: the versions it accepts, the client certificates it refuses,
// and a certificate rotated on disk served without a restart.
func TestServeOverTLS(t *testing.T) {
	dsn := testDSN(t)
	dir := t.TempDir()
	ca, clientCA := tlstest.NewCA(t, "server CA"), tlstest.NewCA(t, "client CA")
	certFile, keyFile := ca.Server(t, "gpumeter-1").Write(t, dir, "server")
	clientCAFile := filepath.Join(dir, "clients.pem")
	clientCA.WriteCA(t, clientCAFile)
	issued := clientCA.Client(t, "kube-apiserver")
	clientCert, err := tls.X509KeyPair(issued.CertPEM, issued.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	addr := harness.FreeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--clickhouse", dsn, "serve", "--listen", addr, "--metrics-listen", "", "--audit-queue", t.TempDir(),
			"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCAFile}, io.Discard, &stderr)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exit %d: %s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop after its context ended")
		}
	}
	t.Cleanup(stop)

	client := func(version uint16, certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: ca.Pool(), Certificates: certs, MinVersion: version, MaxVersion: version}}}
	}
	get := func(c *http.Client, path string) (int, *tls.ConnectionState, error) {
		resp, err := c.Get("https://" + addr + path)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.TLS, nil
	}
	eventually(t, "serve to answer over TLS", 30*time.Second, func() bool {
		code, _, _ := get(client(tls.VersionTLS13, clientCert), "/readyz")
		return code == http.StatusOK
	})
	for _, v := range []struct {
		name    string
		version uint16
		ok      bool
	}{{"TLS 1.1", tls.VersionTLS11, false}, {"TLS 1.2", tls.VersionTLS12, true}, {"TLS 1.3", tls.VersionTLS13, true}} {
		code, _, err := get(client(v.version, clientCert), "/healthz")
		if v.ok && (err != nil || code != http.StatusOK) {
			t.Errorf("%s with a client certificate: %d, %v; want 200", v.name, code, err)
		}
		if !v.ok && err == nil {
			t.Errorf("%s: %d; want the handshake refused", v.name, code)
		}
		// No client certificate: refused at every version.
		if code, _, err := get(client(v.version), "/healthz"); err == nil {
			t.Errorf("%s without a client certificate: %d; want refused", v.name, code)
		}
	}
	// Plain HTTP to the TLS port gets no API answer.
	if code, _ := harness.HTTPGet(addr, "/healthz"); code == http.StatusOK {
		t.Error("plain HTTP to the TLS listener answered 200")
	}

	// Rotation: a new pair written over the files is presented by the
	// next handshakes, within serve's check interval, without a restart.
	rotated := ca.Server(t, "gpumeter-2")
	if err := os.WriteFile(keyFile, rotated.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, rotated.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second) // a coarse file system may keep the old second
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the rotated certificate to be served", 15*time.Second, func() bool {
		// A fresh connection each time: a kept-alive one shows the old
		// handshake.
		code, state, err := get(client(tls.VersionTLS13, clientCert), "/healthz")
		return err == nil && code == http.StatusOK && state.PeerCertificates[0].Subject.CommonName == "gpumeter-2"
	})
	stop()
	if want := "portal_url=https://" + addr + "/portal/"; !strings.Contains(stderr.String(), want) {
		t.Errorf("serve did not log %s at start:\n%s", want, stderr.String())
	}
	if !strings.Contains(stderr.String(), "TLS certificate reloaded") {
		t.Errorf("serve did not log the reload:\n%s", stderr.String())
	}
}

// The API's transport is input: no TLS and no --plain-http, or TLS files
// that do not load, are exit 2 before ClickHouse is dialled, naming the
// fix or the file; plain HTTP beyond loopback is served with a warning.
func TestServeTransportIsInput(t *testing.T) {
	down := "clickhouse://127.0.0.1:1/none"
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "server").Write(t, dir, "server")
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("-----BEGIN PRIVATE KEY-----\nnot one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inConfig := writeTemp(t, "tls.yaml", "server:\n  tls:\n    cert_file: "+missing+"\n    key_file: "+key+"\n")
	plainInConfig := writeTemp(t, "plain.yaml", "server:\n  plain_http: true\n  listen: 0.0.0.0:0\n")
	for _, c := range []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"neither TLS nor plain HTTP", nil, []string{"--tls-cert", "--tls-key", "--plain-http"}},
		{"TLS and plain HTTP", []string{"--tls-cert", cert, "--tls-key", key, "--plain-http"}, []string{"choose one"}},
		{"a certificate without its key", []string{"--tls-cert", cert}, []string{"give both or neither"}},
		{"a missing certificate", []string{"--tls-cert", missing, "--tls-key", key}, []string{"server.tls.cert_file", missing}},
		{"a missing key", []string{"--tls-cert", cert, "--tls-key", missing}, []string{"server.tls.key_file", missing}},
		{"a key that is no key", []string{"--tls-cert", cert, "--tls-key", garbage}, []string{garbage}},
		{"a missing client CA", []string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", missing}, []string{"server.tls.client_ca_file", missing}},
		{"a missing certificate in the config", []string{"--config", inConfig}, []string{"server.tls.cert_file", missing}},
		{"a bad client_auth", []string{"--config", writeTemp(t, "ca.yaml", "server:\n  tls: {client_auth: always}\n"), "--plain-http"}, []string{"server.tls.client_auth", "always"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--clickhouse", down, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""}, c.args...)
			code, _, stderr := gpumeter(t, args...)
			if code != 2 {
				t.Fatalf("exit %d; want 2 (input refused before dialling):\n%s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not name %q:\n%s", w, stderr)
				}
			}
		})
	}

	const warning = "plain HTTP on a non-loopback address"
	for _, c := range []struct {
		name string
		args []string
		warn bool
	}{
		{"plain HTTP on 0.0.0.0", []string{"serve", "--plain-http", "--listen", "0.0.0.0:0"}, true},
		{"plain HTTP on all addresses, port only", []string{"serve", "--plain-http", "--listen", ":0"}, true},
		{"plain HTTP on 0.0.0.0 from the config", []string{"--config", plainInConfig, "serve"}, true},
		{"plain HTTP on loopback", []string{"serve", "--plain-http", "--listen", "127.0.0.1:0"}, false},
		{"TLS on 0.0.0.0", []string{"serve", "--tls-cert", cert, "--tls-key", key, "--listen", "0.0.0.0:0"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Past the transport checks, serve dials the unreachable
			// ClickHouse and fails with 1.
			code, _, stderr := gpumeter(t, append([]string{"--clickhouse", down}, append(c.args, "--metrics-listen", "")...)...)
			if code != 1 || !strings.Contains(stderr, "127.0.0.1:1") {
				t.Fatalf("exit %d; want 1 from dialling the unreachable ClickHouse:\n%s", code, stderr)
			}
			if got := strings.Contains(stderr, warning) && strings.Contains(stderr, "level=WARN"); got != c.warn {
				t.Errorf("warning logged: %v; want %v:\n%s", got, c.warn, stderr)
			}
		})
	}
}

// portalURL names the scheme the listener speaks.
func TestPortalURLScheme(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4zero, Port: 8443}
	if got := portalURL(addr, true); got != "https://localhost:8443/portal/" {
		t.Errorf("over TLS: %s", got)
	}
	if got := portalURL(addr, false); got != "http://localhost:8443/portal/" {
		t.Errorf("plain: %s", got)
	}
}
