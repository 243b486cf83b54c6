package leader

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/internal/certreload"
	"github.com/gpumeter/gpumeter/internal/election"
)

// ForwardedHeader marks a request one replica forwarded to the leader:
// the receiver decides it or answers 503, never forwards it again.
const ForwardedHeader = "Gpumeter-Forwarded-By"

// forwardTimeout bounds the leader lookup and the forwarded request: well
// inside the Kubernetes webhook's timeout (10 s by default), so the caller
// gets a 503 and its failurePolicy rather than a timeout.
const forwardTimeout = 5 * time.Second

// maxForwardedResponse bounds the leader's answer read back.
const maxForwardedResponse = 4 << 20

// ErrNoLeader: no replica leads that this one can forward to (an election
// is under way, or the leader it found no longer leads).
var ErrNoLeader = errors.New("no leader replica to decide admissions; retry shortly")

// Forwarder sends admissions, and reads only the leader can answer, to
// the leader when this replica does not lead (docs/ha.md).
type Forwarder struct {
	gate    *Gate
	elector election.Elector
	self    string // this replica's identity
	scheme  string // http or https, as every replica listens
	client  *http.Client

	// The leader last read from the engine, kept for leaderTTL so that a
	// forwarded admission does not ask the engine (ZooKeeper: two round
	// trips) every time; forgotten when forwarding to it fails or it
	// answers 503 (it no longer leads).
	leaderTTL time.Duration
	now       func() time.Time
	mu        sync.Mutex
	cached    election.Leader
	cachedAt  time.Time
}

// leaderTTL is how long a follower forwards to the leader it last read.
const leaderTTL = time.Second

// leader is the engine's leader, from the cache while it is fresh.
func (f *Forwarder) leader(ctx context.Context) (election.Leader, error) {
	f.mu.Lock()
	if f.cached.Identity != "" && f.now().Sub(f.cachedAt) < f.leaderTTL {
		l := f.cached
		f.mu.Unlock()
		return l, nil
	}
	f.mu.Unlock()
	l, err := f.elector.Leader(ctx)
	if err != nil {
		return l, err
	}
	f.mu.Lock()
	f.cached, f.cachedAt = l, f.now()
	f.mu.Unlock()
	return l, nil
}

// forget drops the cached leader when it is identity.
func (f *Forwarder) forget(identity string) {
	f.mu.Lock()
	if f.cached.Identity == identity {
		f.cached = election.Leader{}
	}
	f.mu.Unlock()
}

// ForwardTLS says how a follower checks the leader's certificate.
type ForwardTLS struct {
	// CAFile verifies the leader's certificate; empty: the system roots.
	CAFile string
	// ServerName is the name the leader's certificate must carry; empty:
	// the leader's host (its identity). Replicas reached by pod IP often
	// share one certificate for the Service's DNS name.
	ServerName string
	// CertFile and KeyFile are the client certificate presented to a
	// leader whose listener requires one (re-read when they change);
	// empty: none.
	CertFile, KeyFile string
	// Logger logs certificate reloads; nil: slog.Default().
	Logger *slog.Logger
}

// NewForwarder forwards to the leader e reports, over HTTPS when
// overTLS (checked as t says), else plain HTTP.
func NewForwarder(gate *Gate, e election.Elector, self string, overTLS bool, t ForwardTLS) (*Forwarder, error) {
	f := &Forwarder{gate: gate, elector: e, self: self, scheme: "http", leaderTTL: leaderTTL, now: time.Now}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // replicas reach each other directly
	if overTLS {
		f.scheme = "https"
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("forward CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("forward CA %s: no PEM certificate in it", t.CAFile)
			}
			tc.RootCAs = pool
		}
		if t.CertFile != "" || t.KeyFile != "" {
			log := t.Logger
			if log == nil {
				log = slog.Default()
			}
			pair, err := certreload.New("election.forward", t.CertFile, t.KeyFile, certreload.CheckInterval, time.Now, log)
			if err != nil {
				return nil, err
			}
			tc.GetClientCertificate = pair.GetClientCertificate
		}
		transport.TLSClientConfig = tc
	}
	f.client = &http.Client{Transport: transport, Timeout: forwardTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return f, nil
}

// Forwarded is the leader's answer to a forwarded request.
type Forwarded struct {
	Status      int
	ContentType string
	Body        []byte
	Leader      string // the identity that answered
}

// Forward sends an admission (path, the caller's Authorization and
// Content-Type, body) to the leader when another replica leads. local is
// true when this replica leads and decides itself. ErrNoLeader (wrapped)
// when there is nobody to forward to, or when the request was already
// forwarded to this replica and it does not lead.
func (f *Forwarder) Forward(ctx context.Context, path string, header http.Header, body []byte) (out Forwarded, local bool, err error) {
	return f.send(ctx, http.MethodPost, path, header, body)
}

// ForwardGet sends a read (path and query string, the caller's
// Authorization) to the leader when another replica leads, as Forward
// does: for answers only the leader's memory holds, such as the admitted
// work of GET /v1/quotas.
func (f *Forwarder) ForwardGet(ctx context.Context, path, rawQuery string, header http.Header) (out Forwarded, local bool, err error) {
	target := path
	if rawQuery != "" {
		target += "?" + rawQuery
	}
	return f.send(ctx, http.MethodGet, target, header, nil)
}

// send forwards one request (target: path and query) to the leader.
func (f *Forwarder) send(ctx context.Context, method, target string, header http.Header, body []byte) (out Forwarded, local bool, err error) {
	if f.gate.Leading() {
		return Forwarded{}, true, nil
	}
	if from := header.Get(ForwardedHeader); from != "" {
		return Forwarded{}, false, fmt.Errorf("%w (forwarded by %s to a replica that does not lead)", ErrNoLeader, from)
	}
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	l, err := f.leader(ctx)
	if err != nil {
		return Forwarded{}, false, fmt.Errorf("%w: %w", ErrNoLeader, err)
	}
	if l.Identity == f.self { // elected, the term not begun yet (or just ended)
		f.forget(l.Identity)
		return Forwarded{}, false, fmt.Errorf("%w (this replica is taking the lead)", ErrNoLeader)
	}
	var reqBody io.Reader
	if body != nil {
		reqBody = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.scheme+"://"+l.Identity+target, reqBody)
	if err != nil {
		return Forwarded{}, false, fmt.Errorf("%w: leader %q: %w", ErrNoLeader, l.Identity, err)
	}
	req.Header.Set("Authorization", header.Get("Authorization"))
	if ct := header.Get("Content-Type"); ct != "" && method == http.MethodPost {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set(ForwardedHeader, f.self)
	resp, err := f.client.Do(req)
	if err != nil {
		f.forget(l.Identity)
		return Forwarded{}, false, fmt.Errorf("%w: forward to leader %s: %w", ErrNoLeader, l.Identity, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		f.forget(l.Identity) // it no longer leads, or cannot decide yet
	}
	// One byte over the cap tells a cut answer from a whole one: a cut
	// one is never relayed as if it were the leader's.
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedResponse+1))
	if err != nil {
		return Forwarded{}, false, fmt.Errorf("%w: read the answer of leader %s: %w", ErrNoLeader, l.Identity, err)
	}
	if len(b) > maxForwardedResponse {
		return Forwarded{}, false, fmt.Errorf("%w: the answer of leader %s is over %d bytes", ErrNoLeader, l.Identity, maxForwardedResponse)
	}
	return Forwarded{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b, Leader: l.Identity}, false, nil
}
