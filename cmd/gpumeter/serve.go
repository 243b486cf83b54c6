package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/admission"
	"github.com/gpumeter/gpumeter/internal/auditqueue"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/jobs"
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
		Use:   "serve [--listen ADDR] [--metrics-listen ADDR] [--audit-queue DIR]",
		Short: "run the server: HTTP API and portal, scheduled rollups, retention and invoices",
		Long: `serve runs the server: /healthz, /readyz, the /v1 API and the customer portal
(/portal/) on --listen (docs/api.md); /metrics on its own --metrics-listen,
since it names tenants; quota admission (docs/quotas.md); webhook delivery;
and the cron jobs of the config: the hourly rollup, raw retention, the
monthly invoice run (with a billing section) and anomaly detection (with
insights.schedule). The flags' defaults are the config's server section.
SIGINT or SIGTERM stops it after the requests in flight.`,
		Example: "  gpumeter --config /etc/gpumeter/gpumeter.yaml serve --listen 0.0.0.0:8080 --metrics-listen 127.0.0.1:9402",
		Args:    cli.NoArgs,
	}
	fs := cmd.Flags()
	listen := fs.String("listen", g.cfg.Server.Listen, "HTTP listen address of the API and portal")
	auditQueueDir := fs.String("audit-queue", g.cfg.Server.AuditQueue.Dir, "directory of the on-disk queue of audit entries ClickHouse refused; empty drops them (counted)")
	metricsListen := fs.String("metrics-listen", g.cfg.Server.MetricsListen, "HTTP listen address of /metrics (apart from the API); empty disables")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		cli.ConfigDefault(fs, "listen", listen, g.cfg.Server.Listen)
		cli.ConfigDefault(fs, "audit-queue", auditQueueDir, g.cfg.Server.AuditQueue.Dir)
		cli.ConfigDefault(fs, "metrics-listen", metricsListen, g.cfg.Server.MetricsListen)
		srvCfg := g.cfg.Server
		srvCfg.Listen = *listen
		srvCfg.MetricsListen = *metricsListen
		srvCfg.AuditQueue.Dir = *auditQueueDir
		pdf, err := g.cfg.Reports.PDF()
		if err != nil {
			return cli.Usage(err)
		}
		if err := srvCfg.Validate(); err != nil {
			return cli.Usage(err)
		}
		// The jobs are scheduled before ClickHouse is dialled, so a bad cron
		// spec in the config file is reported as the input error it is. They
		// reach the store through these variables, set below before
		// sched.Start runs anything.
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		sched, err := jobs.NewScheduler(g.logger, reg)
		if err != nil {
			return err
		}
		var hourly *rollup.Service
		var retention *rollup.Retention
		if err := sched.Add(ctx, "rollup", g.cfg.Rollup.Schedule, 30*time.Minute, func(ctx context.Context) error {
			_, err := hourly.Run(ctx)
			return err
		}); err != nil {
			return cli.Usagef("rollup.schedule: %w", err)
		}
		if err := sched.Add(ctx, "retention", g.cfg.Retention.Schedule, time.Hour, func(ctx context.Context) error {
			_, err := retention.Run(ctx)
			return err
		}); err != nil {
			return cli.Usagef("retention.schedule: %w", err)
		}
		// The scheduled anomaly detection checks the hours the rollup closed.
		var insightsRun func(ctx context.Context) error
		if spec := g.cfg.Insights.Schedule; spec != "" {
			if err := sched.Add(ctx, "insights", spec, 30*time.Minute, func(ctx context.Context) error { return insightsRun(ctx) }); err != nil {
				return cli.Usagef("insights.schedule: %w", err)
			}
		}
		var invoices *billing.Runner
		if len(g.cfg.Billing.Customers) > 0 {
			if err := sched.Add(ctx, "invoice", g.cfg.Billing.Schedule, 30*time.Minute, func(ctx context.Context) error {
				rep, err := invoices.Run(ctx, billing.RunRequest{Period: billing.PreviousMonth(time.Now()), KeepDrafts: true}, nil)
				if err != nil {
					return err
				}
				for _, o := range rep.Outcomes {
					if o.Action != billing.ActionUnchanged {
						g.logger.Info("invoice run", "outcome", o.String())
					}
				}
				if n := rep.Failed(); n > 0 {
					return fmt.Errorf("%d customer(s) could not be invoiced", n)
				}
				return nil
			}); err != nil {
				return cli.Usagef("billing.schedule: %w", err)
			}
		}

		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		var auditQueue server.AuditQueue
		if srvCfg.AuditQueue.Dir != "" {
			q, err := auditqueue.Open(srvCfg.AuditQueue)
			if err != nil {
				return fmt.Errorf("server.audit_queue.dir (--audit-queue; empty keeps no queue, and audit entries ClickHouse refuses are dropped): %w", err)
			}
			defer q.Close()
			if n, _ := q.Pending(); n > 0 {
				g.logger.Info("audit queue: entries kept from an earlier run", "entries", n, "dir", srvCfg.AuditQueue.Dir)
			}
			auditQueue = q
		}
		hourly = rollup.New(s, g.cfg.Rollup, time.Now, g.logger)
		retention = rollup.NewRetention(s, g.cfg.Retention, time.Now, g.logger)
		invoices = billing.NewRunner(s, g.cfg.Billing, billing.DefaultLeaseConfig(), time.Now, g.logger)
		invoices.Announce = webhook.NewPublisher(s, time.Now)
		prices, err := insightPrices(g, "")
		if err != nil {
			return err
		}
		ins := insights.New(store.NewInsightsReader(s), webhook.NewPublisher(s, time.Now), prices, time.Now, g.logger)
		insightsRun = func(ctx context.Context) error {
			st, ok, err := s.LoadRollupState(ctx, rollup.StateKey)
			if err != nil || !ok {
				return err
			}
			found, fresh, err := ins.DetectClosed(ctx, st.ClosedThrough, g.cfg.Insights.Lookback)
			if err != nil {
				return err
			}
			g.logger.Info("insights: anomalies checked", "through", st.ClosedThrough, "found", len(found), "new", len(fresh))
			return nil
		}

		ln, err := net.Listen("tcp", srvCfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", srvCfg.Listen, err)
		}
		g.logger.Info("serving", "addr", ln.Addr().String(), "portal_url", portalURL(ln.Addr()))
		checks := []server.Check{{Name: "clickhouse", Ready: s.Ping},
			{Name: "migrations", Ready: func(ctx context.Context) error { return s.Migrated(ctx, schemas.FS) }}}
		// /metrics names tenants and their quota figures: it has a listener of
		// its own, never the API and portal's.
		if srvCfg.MetricsListen != "" {
			mln, err := net.Listen("tcp", srvCfg.MetricsListen)
			if err != nil {
				ln.Close()
				return fmt.Errorf("listen %s (server.metrics_listen): %w", srvCfg.MetricsListen, err)
			}
			g.logger.Info("serving metrics", "addr", mln.Addr().String())
			msrv := server.New(srvCfg, reg, g.logger, checks...)
			msrv.MountMetrics(reg)
			metricsCtx, stopMetrics := context.WithCancel(ctx)
			metricsDone := make(chan error, 1)
			go func() { metricsDone <- msrv.Serve(metricsCtx, mln) }()
			defer func() {
				stopMetrics()
				if err := <-metricsDone; err != nil {
					g.logger.Warn("metrics listener", "err", err)
				}
			}()
		}
		sched.Start()
		defer sched.Stop()
		srv := server.New(srvCfg, reg, g.logger, checks...)
		use := usage.New(s, g.cfg.Billing, time.Now)
		apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
		quotas, err := quota.NewService(use, s, g.cfg.Billing, g.cfg.Quotas, time.Now, g.logger)
		if err != nil {
			stopAPI()
			return cli.Usage(err)
		}
		reg.MustRegister(quotas)
		quotasDone := make(chan struct{})
		go func() {
			defer close(quotasDone)
			quotas.Run(apiCtx, webhook.NewPublisher(s, time.Now))
		}()
		webhooksDone := make(chan struct{})
		go func() {
			defer close(webhooksDone)
			if len(g.cfg.Webhooks.Endpoints) > 0 {
				webhook.NewSender(g.cfg.Webhooks, s, g.logger).Run(apiCtx, s)
			}
		}()
		waitAPI := srv.MountAPI(apiCtx, reg, server.API{Keys: s, Audit: s, AuditQueue: auditQueue, PDF: pdf,
			Usage: use, Cost: use, Tenants: use, Invoices: billing.NewInvoiceService(s, g.cfg.Billing.Issuer.ID),
			Chargeback: billing.NewChargebackService(s, g.cfg.Chargeback), Quotas: quotas,
			Kubernetes: admission.NewWebhook(quotas, g.cfg.Kubernetes), Insights: ins})
		err = srv.Serve(ctx, ln)
		stopAPI() // after the last request: the audit writer flushes what it holds
		waitAPI()
		<-quotasDone
		<-webhooksDone
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	return cmd
}

// portalURL is where a browser on this host finds the portal.
func portalURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/portal/"
}
