// Package webhook sends gpumeter's events to the HTTP endpoints operators
// configure: JSON bodies signed with HMAC-SHA256 over a timestamp and the
// body, retried with exponential backoff and jitter, every attempt
// recorded. Events are made in one place, Publisher, which domains call
// through small interfaces of their own; they are written to an outbox
// first (the store), by any process, and `gpumeter serve` delivers what
// the outbox holds.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// Event types.
const (
	TypeQuotaCrossed     = "quota.threshold_crossed"
	TypeInvoiceFinalized = "invoice.finalized"
	TypeInsightAnomaly   = "insight.anomaly"
	// The credit job's events (credits.go).
	TypeCreditsThreshold = "credits.balance.threshold"
	TypeCreditsDepleted  = "credits.depleted"
	TypeCreditsExpiring  = "credits.expiring"
)

// knownTypes are the event types an endpoint may ask for.
var knownTypes = []string{TypeQuotaCrossed, TypeInvoiceFinalized, TypeInsightAnomaly,
	TypeCreditsThreshold, TypeCreditsDepleted, TypeCreditsExpiring}

// Event is one thing that happened. Data is the type's payload.
type Event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// NewEvent makes an event with a random id.
func NewEvent(typ string, at time.Time, data any) (Event, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("event %s: %w", typ, err)
	}
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Event{}, fmt.Errorf("event id: %w", err)
	}
	return Event{ID: "evt_" + hex.EncodeToString(id[:]), Type: typ, CreatedAt: at.UTC().Truncate(time.Second), Data: b}, nil
}

// SignatureHeader carries the signature: t=UNIX_SECONDS,v1=HEX, where
// HEX is HMAC-SHA256(secret, "UNIX_SECONDS." + body).
const SignatureHeader = "Gpumeter-Signature"

// Sign is the signature header value of body at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Errors of Verify: the delivery a receiver got is not valid, so both
// are in the validation category.
var (
	ErrBadSignature = fault.Validation(errors.New("webhook signature does not match"))
	ErrStale        = fault.Validation(errors.New("webhook timestamp outside the tolerance"))
)

// Verify checks a signature header against body, the way a receiver
// should: the HMAC compared in constant time, the timestamp within
// tolerance of now (against replays).
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return fmt.Errorf("%w: want t=...,v1=...", ErrBadSignature)
	}
	if !hmac.Equal([]byte(sig), []byte(mac(secret, ts, body))) {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s", ErrStale, d.Round(time.Second))
	}
	return nil
}

// Endpoint is one receiver.
type Endpoint struct {
	Name   string   `yaml:"name"`
	URL    string   `yaml:"url"`
	Secret string   `yaml:"secret"` // the HMAC key; keep it out of logs
	Events []string `yaml:"events"` // types to send; empty: every type
}

// LogValue keeps the secret, and the credentials a URL may carry, out of
// logs.
func (e Endpoint) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", e.Name), slog.String("url", RedactURL(e.URL)))
}

// RedactURL is raw with what may be a credential hidden, for logs, errors
// and stored attempts: the user information becomes "***" and every query
// value "redacted" (https://***@host/path?api_key=redacted). url.URL's
// Redacted hides only a password, and an api_key in the query is as
// secret. A URL that does not parse is not shown at all.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return redacted(u)
}

func redacted(u *url.URL) string {
	c := *u
	hadUser := c.User != nil
	c.User = nil
	if c.RawQuery != "" {
		q := c.Query()
		for k := range q {
			for i := range q[k] {
				q[k][i] = "redacted"
			}
		}
		if len(q) == 0 {
			c.RawQuery = "redacted"
		} else {
			c.RawQuery = q.Encode()
		}
	}
	if c.Fragment != "" || c.RawFragment != "" {
		c.Fragment, c.RawFragment = "redacted", ""
	}
	out := c.String()
	if hadUser {
		// url.Userinfo cannot print a bare "***@" (it escapes the stars),
		// so the marker goes in after the authority's "//".
		if i := strings.Index(out, "//"); i >= 0 {
			out = out[:i+2] + "***@" + out[i+2:]
		}
	}
	return out
}

// secretsOf returns the parts of raw that must never be shown: the whole
// URL as given, its user information and its query values (raw and
// decoded). Short values are left out, since replacing them would mangle
// unrelated text and they guard nothing.
func secretsOf(raw string) []string {
	out := []string{raw}
	u, err := url.Parse(raw)
	if err != nil {
		return out
	}
	add := func(v string) {
		if len(v) >= 3 {
			out = append(out, v)
		}
	}
	if u.User != nil {
		add(u.User.String())
		add(u.User.Username())
		if p, ok := u.User.Password(); ok {
			add(p)
		}
	}
	add(u.RawQuery)
	for _, vs := range u.Query() {
		for _, v := range vs {
			add(v)
			add(url.QueryEscape(v))
		}
	}
	// Longest first, so that a value inside a longer secret does not break
	// the longer one's match.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// redactError is err's text with rawURL's credentials hidden. Go's HTTP
// client wraps every error in a *url.Error that prints the whole URL; it
// is rebuilt around the redacted URL, and whatever else still holds a
// secret of the URL (a nested error) is scrubbed.
func redactError(err error, rawURL string) string {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		msg = fmt.Sprintf("%s %q: %s", ue.Op, RedactURL(ue.URL), ue.Err.Error())
	}
	return scrub(msg, rawURL)
}

// scrub replaces every secret of rawURL in msg.
func scrub(msg, rawURL string) string {
	for _, s := range secretsOf(rawURL) {
		if s == rawURL {
			msg = strings.ReplaceAll(msg, s, RedactURL(rawURL))
			continue
		}
		msg = strings.ReplaceAll(msg, s, "redacted")
	}
	return msg
}

// Wants says whether the endpoint takes events of typ.
func (e Endpoint) Wants(typ string) bool {
	if len(e.Events) == 0 {
		return true
	}
	for _, t := range e.Events {
		if t == typ {
			return true
		}
	}
	return false
}

// Config is the webhooks section of the config.
type Config struct {
	Endpoints      []Endpoint    `yaml:"endpoints"`
	MaxAttempts    int           `yaml:"max_attempts"`
	BackoffInitial time.Duration `yaml:"backoff_initial"`
	BackoffMax     time.Duration `yaml:"backoff_max"`
	Timeout        time.Duration `yaml:"timeout"` // of one attempt
	Poll           time.Duration `yaml:"poll"`    // how often serve looks into the outbox
}

// DefaultConfig retries eight times from 1 s up to 5 min apart.
func DefaultConfig() Config {
	return Config{MaxAttempts: 8, BackoffInitial: time.Second, BackoffMax: 5 * time.Minute, Timeout: 10 * time.Second, Poll: 5 * time.Second}
}

// Validate names the field of every problem.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.MaxAttempts < 1 || c.MaxAttempts > 100 {
		add("webhooks.max_attempts %d: want 1 to 100", c.MaxAttempts)
	}
	if c.BackoffInitial <= 0 || c.BackoffMax < c.BackoffInitial {
		add("webhooks.backoff_initial %s / backoff_max %s: positive, max at least initial", c.BackoffInitial, c.BackoffMax)
	}
	if c.Timeout <= 0 || c.Poll <= 0 {
		add("webhooks.timeout and webhooks.poll: must be positive")
	}
	names := map[string]bool{}
	for i, e := range c.Endpoints {
		at := fmt.Sprintf("webhooks.endpoints[%d]", i)
		if e.Name == "" || names[e.Name] {
			add("%s.name %q: required and unique", at, e.Name)
		}
		names[e.Name] = true
		// The URL may carry credentials: errors show it redacted, or not
		// at all when it does not parse.
		if u, err := url.Parse(e.URL); err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			add("%s.url: want an http(s) URL: %s", at, scrub(err.Error(), e.URL))
		} else if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			add("%s.url %q: want an http(s) URL", at, redacted(u))
		}
		if len(e.Secret) < 16 {
			add("%s.secret: at least 16 characters", at)
		}
		for _, t := range e.Events {
			if !slices.Contains(knownTypes, t) {
				add("%s.events: unknown type %q (want one of %s)", at, t, strings.Join(knownTypes, ", "))
			}
		}
	}
	return errors.Join(errs...)
}

// Attempt is one delivery attempt, as recorded.
type Attempt struct {
	EventID  string
	Endpoint string
	N        int // 1 for the first
	At       time.Time
	Status   int // HTTP status; 0 when no response
	Error    string
	Duration time.Duration
}

// Delivered says whether the attempt succeeded (a 2xx).
func (a Attempt) Delivered() bool { return a.Status >= 200 && a.Status < 300 }

// Recorder keeps attempts (ClickHouse in serve).
type Recorder interface {
	RecordAttempt(ctx context.Context, a Attempt) error
}

// Sender delivers events.
type Sender struct {
	cfg    Config
	client *http.Client
	rec    Recorder
	sleep  func(ctx context.Context, d time.Duration) error
	now    func() time.Time
	logger *slog.Logger
}

// NewSender builds a sender; rec records every attempt.
func NewSender(cfg Config, rec Recorder, logger *slog.Logger) *Sender {
	client := &http.Client{
		Timeout: cfg.Timeout,
		// A redirect is not followed: Go would follow a 302 with a GET
		// without the body, and that GET's 2xx is no delivery. The 3xx
		// is a failed attempt, retried like any other.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Sender{cfg: cfg, client: client, rec: rec, sleep: sleepCtx, now: time.Now,
		logger: logger.With("component", "webhook")}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Backoff is the wait before attempt n+1: doubling from the initial
// delay up to the maximum, with full jitter (a random fraction of it),
// so receivers that failed together are not retried together.
func (c Config) Backoff(n int) time.Duration {
	d := c.BackoffInitial
	for i := 1; i < n && d < c.BackoffMax; i++ {
		d *= 2
	}
	if d > c.BackoffMax {
		d = c.BackoffMax
	}
	j, err := rand.Int(rand.Reader, big.NewInt(int64(d)/2+1))
	if err != nil {
		return d
	}
	return d/2 + time.Duration(j.Int64())
}

// Deliver sends ev to ep until a 2xx or tries attempts, recording each
// attempt; it returns the last attempt. Attempt numbers continue from
// first (after the attempts already made).
func (s *Sender) Deliver(ctx context.Context, ep Endpoint, ev Event, first, tries int) (Attempt, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return Attempt{}, fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	var last Attempt
	for n := first; n < first+tries; n++ {
		last = s.attempt(ctx, ep, ev.ID, body, n)
		if err := s.rec.RecordAttempt(context.WithoutCancel(ctx), last); err != nil {
			s.logger.Error("record webhook attempt", "event", ev.ID, "endpoint", ep, "err", err)
		}
		if last.Delivered() {
			return last, nil
		}
		s.logger.Warn("webhook attempt failed", "event", ev.ID, "endpoint", ep, "attempt", n, "status", last.Status, "err", last.Error)
		if n == first+tries-1 {
			break
		}
		if err := s.sleep(ctx, s.cfg.Backoff(n-first+1)); err != nil {
			return last, err
		}
	}
	return last, fmt.Errorf("event %s to %s: not delivered after %d attempts (last: %d %s)", ev.ID, ep.Name, tries, last.Status, last.Error)
}

func (s *Sender) attempt(ctx context.Context, ep Endpoint, id string, body []byte, n int) Attempt {
	a := Attempt{EventID: id, Endpoint: ep.Name, N: n, At: s.now().UTC()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		a.Error = redactError(err, ep.URL)
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpumeter-webhook/1")
	req.Header.Set("Gpumeter-Event-ID", id)
	req.Header.Set(SignatureHeader, Sign([]byte(ep.Secret), a.At, body))
	began := time.Now()
	resp, err := s.client.Do(req)
	a.Duration = time.Since(began)
	if err != nil {
		a.Error = redactError(err, ep.URL)
		return a
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	a.Status = resp.StatusCode
	switch {
	case a.Delivered():
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		loc := resp.Header.Get("Location")
		if u, err := resp.Location(); err == nil {
			loc = redacted(u)
		} else if loc != "" {
			loc = RedactURL(loc)
		} else {
			loc = "(no Location)"
		}
		a.Error = scrub(fmt.Sprintf("%s: redirect to %s not followed (webhooks are not redirected: configure the final URL)", resp.Status, loc), ep.URL)
	default:
		a.Error = resp.Status
	}
	return a
}
