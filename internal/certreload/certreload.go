// Package certreload holds a TLS certificate and key read from files and
// re-read when they change: the API listener serves it, and a follower
// presents it to the leader when it forwards. Kubernetes swaps a Secret's
// files by a symlink, cert-manager and certbot rewrite them; either moves
// the modification time or the size.
package certreload

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CheckInterval bounds how often a handshake stats the files: rotation is
// seen within it, and a busy listener does not stat twice per connection.
const CheckInterval = 2 * time.Second

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

// Pair is a certificate and its key, re-read at most once per interval
// when their stamps change. A bad new pair is logged and the old one kept.
type Pair struct {
	field             string // the config section errors name, e.g. server.tls
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time
	logger            *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamps  [2]fileStamp // of the pair last tried, loaded or not
	checked time.Time
}

// New reads the pair; its errors name field's cert_file and key_file.
func New(field, certFile, keyFile string, interval time.Duration, now func() time.Time, logger *slog.Logger) (*Pair, error) {
	p := &Pair{field: field, certFile: certFile, keyFile: keyFile, interval: interval, now: now, logger: logger}
	stamps, err := p.stamps2()
	if err != nil {
		return nil, err
	}
	cert, err := p.load()
	if err != nil {
		return nil, err
	}
	p.cert, p.stamps, p.checked = cert, stamps, now()
	return p, nil
}

func (p *Pair) stamps2() ([2]fileStamp, error) {
	cs, err := stampOf(p.certFile)
	if err != nil {
		return [2]fileStamp{}, fmt.Errorf("%s.cert_file: %w", p.field, err)
	}
	ks, err := stampOf(p.keyFile)
	if err != nil {
		return [2]fileStamp{}, fmt.Errorf("%s.key_file: %w", p.field, err)
	}
	return [2]fileStamp{cs, ks}, nil
}

// load reads the pair; its error names both files, since a mismatch
// between them is a fault of neither alone.
func (p *Pair) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: certificate %s and key %s: %w", p.field, p.certFile, p.keyFile, err)
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
			cert.Leaf = leaf
		}
	}
	return &cert, nil
}

// Current is the pair, re-read first if its files changed since they
// were last tried.
func (p *Pair) Current() *tls.Certificate {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if now.Sub(p.checked) < p.interval {
		return p.cert
	}
	p.checked = now
	stamps, err := p.stamps2()
	if err != nil {
		p.logger.Error("TLS certificate not reloaded; keeping the previous one", "err", err)
		return p.cert
	}
	if stamps == p.stamps {
		return p.cert
	}
	// Remembered even when the pair fails, so that a half-written rotation
	// is retried when a file moves again, not logged on every handshake.
	p.stamps = stamps
	cert, err := p.load()
	if err != nil {
		p.logger.Error("TLS certificate not reloaded; keeping the previous one", "err", err)
		return p.cert
	}
	p.cert = cert
	attrs := []any{"cert_file", p.certFile}
	if cert.Leaf != nil {
		attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	}
	p.logger.Info("TLS certificate reloaded", attrs...)
	return p.cert
}

// GetCertificate is a server's tls.Config.GetCertificate.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.Current(), nil
}

// GetClientCertificate is a client's tls.Config.GetClientCertificate.
func (p *Pair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return p.Current(), nil
}
