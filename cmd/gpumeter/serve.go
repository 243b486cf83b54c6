package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/cmd/gpumeter/config"
	"github.com/gpumeter/gpumeter/internal/admission"
	"github.com/gpumeter/gpumeter/internal/auditqueue"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/election"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/jobs"
	"github.com/gpumeter/gpumeter/internal/leader"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/schemas"
)

func newServeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve (--tls-cert FILE --tls-key FILE | --plain-http) [--listen ADDR] [--metrics-listen ADDR] [--audit-queue DIR]",
		Short: "run the server: HTTP API and portal, scheduled rollups, retention and invoices",
		Long: `serve runs the server: /healthz, /readyz, the /v1 API and the customer portal
(/portal/) on --listen (docs/api.md); /metrics on its own --metrics-listen,
since it names tenants; quota admission (docs/quotas.md); webhook delivery;
and the cron jobs of the config: the hourly rollup, raw retention, the
monthly invoice run (with a billing section) and anomaly detection (with
insights.schedule). The flags' defaults are the config's server section.
The API listener speaks TLS 1.2+ with --tls-cert and --tls-key (re-read when
they change; --tls-client-ca checks client certificates), or plain HTTP only
with --plain-http; with neither serve refuses to start (docs/operations.md).
With an election section, replicas elect a leader that alone runs the jobs
and webhook delivery and decides admissions; the others forward admissions
to it (docs/ha.md). SIGINT or SIGTERM stops it after the requests in
flight, resigning first.`,
		Example: "  gpumeter --config /etc/gpumeter/gpumeter.yaml serve --listen 0.0.0.0:8443 --tls-cert /etc/gpumeter/tls/tls.crt --tls-key /etc/gpumeter/tls/tls.key --metrics-listen 127.0.0.1:9402\n  gpumeter serve --listen 127.0.0.1:8080 --plain-http",
		Args:    cli.NoArgs,
	}
	fs := cmd.Flags()
	srv := g.cfg.Server
	fs.StringVar(&srv.Listen, "listen", srv.Listen, "HTTP listen address of the API and portal")
	fs.StringVar(&srv.AuditQueue.Dir, "audit-queue", srv.AuditQueue.Dir, "directory of the on-disk queue of audit entries ClickHouse refused; empty drops them (counted)")
	fs.StringVar(&srv.MetricsListen, "metrics-listen", srv.MetricsListen, "HTTP listen address of /metrics (apart from the API); empty disables")
	fs.StringVar(&srv.TLS.CertFile, "tls-cert", srv.TLS.CertFile, "PEM certificate (chain) of the API listener, re-read when it changes (server.tls.cert_file)")
	fs.StringVar(&srv.TLS.KeyFile, "tls-key", srv.TLS.KeyFile, "PEM private key of --tls-cert (server.tls.key_file)")
	fs.StringVar(&srv.TLS.ClientCAFile, "tls-client-ca", srv.TLS.ClientCAFile, "PEM CA that client certificates must chain to; clients without one are refused unless server.tls.client_auth is verify_if_given (server.tls.client_ca_file)")
	fs.BoolVar(&srv.PlainHTTP, "plain-http", srv.PlainHTTP, "serve the API in plain HTTP, without TLS (server.plain_http); warned about on a non-loopback address")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg := g.cfg
		cli.ConfigDefault(fs, "listen", &srv.Listen, cfg.Server.Listen)
		cli.ConfigDefault(fs, "audit-queue", &srv.AuditQueue.Dir, cfg.Server.AuditQueue.Dir)
		cli.ConfigDefault(fs, "metrics-listen", &srv.MetricsListen, cfg.Server.MetricsListen)
		cfg.Server.Listen, cfg.Server.AuditQueue.Dir, cfg.Server.MetricsListen = srv.Listen, srv.AuditQueue.Dir, srv.MetricsListen
		cli.ConfigDefault(fs, "tls-cert", &srv.TLS.CertFile, cfg.Server.TLS.CertFile)
		cli.ConfigDefault(fs, "tls-key", &srv.TLS.KeyFile, cfg.Server.TLS.KeyFile)
		cli.ConfigDefault(fs, "tls-client-ca", &srv.TLS.ClientCAFile, cfg.Server.TLS.ClientCAFile)
		cli.ConfigDefault(fs, "plain-http", &srv.PlainHTTP, cfg.Server.PlainHTTP)
		cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile, cfg.Server.TLS.ClientCAFile, cfg.Server.PlainHTTP = srv.TLS.CertFile, srv.TLS.KeyFile, srv.TLS.ClientCAFile, srv.PlainHTTP
		return runServe(cmd.Context(), g, cfg)
	}
	return cmd
}

// runServe assembles the server: the domain services over one store, the
// scheduled jobs, the API and portal listener and the metrics listener.
func runServe(ctx context.Context, g *globals, cfg config.Config) error {
	pdf, err := cfg.Reports.PDF()
	if err != nil {
		return cli.Usage(err)
	}
	if err := cfg.Server.Validate(); err != nil {
		return cli.Usage(err)
	}
	// The API's transport is settled, and its files read, before anything
	// is dialled: a missing key is the input error it is.
	if err := cfg.Server.RequireTransport(); err != nil {
		return cli.Usage(err)
	}
	if err := cfg.Election.RequireIdentity(); err != nil {
		return cli.Usage(err)
	}
	if err := cfg.Election.CheckClientAuth(cfg.Server.TLS.ClientCAFile != "" && cfg.Server.TLS.ClientAuth != server.ClientAuthVerifyIfGiven); err != nil {
		return cli.Usage(err)
	}
	var tlsConfig *tls.Config
	if cfg.Server.TLS.Enabled() {
		if tlsConfig, err = cfg.Server.TLS.Load(g.logger); err != nil {
			return cli.Usage(err)
		}
	}
	if w := cfg.Server.PlainHTTPWarning(cfg.Server.Listen); w != "" {
		g.logger.Warn(w, "listen", cfg.Server.Listen)
	}
	prices, err := insightPrices(g, "")
	if err != nil {
		return err
	}
	dsn, err := store.ParseDSN(g.dsn)
	if err != nil {
		return cli.Usage(err)
	}
	// Connected, not dialled: a bad cron spec is reported as the input error
	// it is before ClickHouse is asked.
	s, err := store.Connect(dsn, g.logger)
	if err != nil {
		return err
	}
	defer s.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hourly := rollup.New(s, cfg.Rollup, time.Now, g.logger)
	retention := rollup.NewRetention(s, cfg.Retention, time.Now, g.logger)
	use := usage.New(s, cfg.Billing, time.Now)
	creditCustomers, err := cfg.Billing.CreditCustomers()
	if err != nil {
		return cli.Usage(err)
	}
	credit := credits.NewService(s, use, creditCustomers, time.Now)
	invoices := billing.NewRunner(s, cfg.Billing, billing.DefaultLeaseConfig(), time.Now, g.logger)
	invoices.Announce = webhook.NewPublisher(s, time.Now)
	invoices.Credits = credit
	ins := insights.New(store.NewInsightsReader(s), webhook.NewPublisher(s, time.Now), prices, time.Now, g.logger)
	quotas, err := quota.NewService(use, s, cfg.Billing, cfg.Quotas, time.Now, g.logger)
	if err != nil {
		return cli.Usage(err)
	}
	reg.MustRegister(quotas)
	// credit_only customers' admission checks their credit (docs/credits.md).
	if err := quotas.GateCredits(credit, cfg.Credits); err != nil {
		return cli.Usage(err)
	}
	// Replicas keep what the leader admits in ClickHouse, for the next
	// leader to rebuild (docs/ha.md).
	if cfg.Election.Backend != election.BackendNone {
		quotas.LogAdmissions(s)
	}
	sched, err := jobs.NewScheduler(g.logger, reg)
	if err != nil {
		return err
	}
	type job struct {
		name, key, spec string // the job's name in metrics and logs; its config section
		timeout         time.Duration
		run             func(context.Context) error
	}
	scheduled := []job{
		{"rollup", "rollup", cfg.Rollup.Schedule, 30 * time.Minute, func(ctx context.Context) error { _, err := hourly.Run(ctx); return err }},
		{"retention", "retention", cfg.Retention.Schedule, time.Hour, func(ctx context.Context) error { _, err := retention.Run(ctx); return err }},
	}
	// The scheduled anomaly detection checks the hours the rollup closed.
	if cfg.Insights.Schedule != "" {
		scheduled = append(scheduled, job{"insights", "insights", cfg.Insights.Schedule, 30 * time.Minute, func(ctx context.Context) error {
			return ins.DetectScheduled(ctx, hourly.ClosedThrough, cfg.Insights.Lookback)
		}})
	}
	if len(cfg.Billing.Customers) > 0 {
		scheduled = append(scheduled, job{"invoice", "billing", cfg.Billing.Schedule, 30 * time.Minute, invoices.RunScheduled})
		// The credit job: recurring allowances, then the credit webhooks due.
		creditJob := newCreditJob(credit, cfg.Credits, s, g.logger)
		scheduled = append(scheduled, job{"credits", "credits", cfg.Credits.Schedule, 30 * time.Minute, func(ctx context.Context) error {
			_, err := creditJob(ctx)
			return err
		}})
	}
	// Leader-only work (the jobs, webhook delivery, quota crossings) runs
	// while gate is open: always for a single replica, during each term
	// with an election (docs/ha.md).
	gate := leader.Solo()
	if cfg.Election.Backend != election.BackendNone {
		gate = leader.NewGate()
	}
	for _, j := range scheduled {
		if err := sched.Add(ctx, j.name, j.spec, j.timeout, gate.Job(j.name, g.logger, j.run)); err != nil {
			return cli.Usagef("%s.schedule: %w", j.key, err)
		}
	}
	if err := s.Ping(ctx); err != nil {
		return fmt.Errorf("%w (is ClickHouse running? scripts/clickhouse.sh start)", err)
	}
	var auditQueue server.AuditQueue
	if dir := cfg.Server.AuditQueue.Dir; dir != "" {
		q, err := auditqueue.Open(cfg.Server.AuditQueue)
		if err != nil {
			return fmt.Errorf("server.audit_queue.dir (--audit-queue; empty keeps no queue, and audit entries ClickHouse refuses are dropped): %w", err)
		}
		defer q.Close()
		if n, _ := q.Pending(); n > 0 {
			g.logger.Info("audit queue: entries kept from an earlier run", "entries", n, "dir", dir)
		}
		auditQueue = q
	}

	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Server.Listen, err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	g.logger.Info("serving", "addr", ln.Addr().String(), "tls", tlsConfig != nil, "portal_url", portalURL(ln.Addr(), tlsConfig != nil))
	checks := []server.Check{{Name: "clickhouse", Ready: s.Ping},
		{Name: "migrations", Ready: func(ctx context.Context) error { return s.Migrated(ctx, schemas.FS) }}}
	// /metrics names tenants and their quota figures: it has a listener of
	// its own, never the API and portal's.
	if cfg.Server.MetricsListen != "" {
		msrv := server.New(cfg.Server, reg, g.logger, checks...)
		msrv.MountMetrics(reg)
		_, stop, err := msrv.Start(ctx, cfg.Server.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("server.metrics_listen: %w", err)
		}
		defer func() {
			if err := stop(); err != nil {
				g.logger.Warn("metrics listener", "err", err)
			}
		}()
	}
	sched.Start()
	defer sched.Stop()
	var forward server.AdmissionForwarder
	if cfg.Election.Backend != election.BackendNone {
		// Stands once the listener is up (followers forward here); on
		// shutdown it resigns so that another replica leads at once.
		elector, err := election.FromConfigWith(cfg.Election, g.leases, g.logger)
		if err != nil {
			ln.Close()
			return err
		}
		f := cfg.Election.Forward
		fwd, err := leader.NewForwarder(gate, elector, cfg.Election.Identity, tlsConfig != nil, leader.ForwardTLS{CAFile: f.CAFile, ServerName: f.ServerName, CertFile: f.CertFile, KeyFile: f.KeyFile, Logger: g.logger})
		if err != nil {
			elector.Close()
			ln.Close()
			return cli.Usagef("election.forward: %w", err)
		}
		forward = fwd
		campaignDone := make(chan struct{})
		go func() {
			defer close(campaignDone)
			leader.Campaign(ctx, elector, gate, quotas.Rebuild, quotas.FlushLog, g.logger)
		}()
		defer func() { <-campaignDone }()
	}
	// The API's background work (quota evaluation, webhook delivery, the
	// audit writer) outlives ctx until the last request is answered.
	apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	background.Go(func() { quotas.Run(apiCtx, leaderAnnouncer{gate, webhook.NewPublisher(s, time.Now)}) })
	background.Go(func() { quotas.RunLog(apiCtx) })
	if len(cfg.Webhooks.Endpoints) > 0 {
		sender := webhook.NewSender(cfg.Webhooks, s, g.logger)
		background.Go(func() { gate.WhileLeading(apiCtx, func(ctx context.Context) { sender.Run(ctx, s) }) })
	}
	// The Pod webhook reads the ResourceClaims Pods name with the pod's
	// service account; where it has none, Pods with claims are denied.
	podWebhook := admission.NewWebhook(quotas, cfg.Kubernetes)
	if len(cfg.Kubernetes.Namespaces) > 0 {
		if claims, err := admission.InClusterClaims(); err != nil {
			g.logger.Warn("kubernetes: resource claims cannot be read, so Pods with resourceClaims are denied", "err", err)
		} else {
			podWebhook.WithClaims(claims)
		}
	}
	srv := server.New(cfg.Server, reg, g.logger, checks...)
	waitAPI := srv.MountAPI(apiCtx, reg, server.API{Keys: s, Audit: s, AuditQueue: auditQueue, PDF: pdf,
		Usage: use, Cost: use, Tenants: use, Invoices: billing.NewInvoiceService(s, cfg.Billing.Issuer.ID),
		Chargeback: billing.NewChargebackService(s, cfg.Chargeback), Quotas: quotas,
		Kubernetes: podWebhook, Forward: forward, Insights: ins,
		Credits: credit, CreditSettings: cfg.Credits})
	err = srv.Serve(ctx, ln)
	stopAPI() // after the last request: the audit writer flushes what it holds
	waitAPI()
	background.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// leaderAnnouncer announces quota crossings only from the leader: every
// replica refreshes its snapshot (and so marks the same crossings seen),
// one puts them in the outbox.
type leaderAnnouncer struct {
	gate *leader.Gate
	next quota.CrossingAnnouncer
}

func (a leaderAnnouncer) QuotaCrossed(ctx context.Context, cs []quota.Crossing) error {
	if !a.gate.Leading() {
		return nil
	}
	return a.next.QuotaCrossed(ctx, cs)
}

// portalURL is where a browser on this host finds the portal.
func portalURL(addr net.Addr, overTLS bool) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	scheme := "http://"
	if overTLS {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port) + "/portal/"
}
