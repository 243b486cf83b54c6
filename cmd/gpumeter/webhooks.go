package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/reports"
)

func newWebhooksCmd(g *globals) *cobra.Command {
	return cli.Group(&cobra.Command{
		Use:   "webhooks",
		Short: "list the webhook outbox and replay events",
		Long: `webhooks shows the outbox of outbound webhook events (finalized invoices,
quota crossings, anomalies) and sends an event again. serve delivers new
events by itself, signed and retried, every attempt recorded;
docs/webhooks.md has the signature format and how to verify it.`,
		Example: "  gpumeter --config gpumeter.yaml webhooks list --days 30\n" +
			"  gpumeter --config gpumeter.yaml webhooks replay EVENT_ID --endpoint billing",
	}, newWebhooksListCmd(g), newWebhooksReplayCmd(g))
}

func newWebhooksListCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [--days 7] [-o FORMAT]",
		Short: "list the outbox and each event's deliveries",
		Long: `list shows the outbox: each event and, per configured endpoint that wants
its type, whether it was delivered and in how many attempts.`,
		Example: "  gpumeter --config gpumeter.yaml webhooks list --days 30",
		Args:    cli.NoArgs,
	}
	days := cmd.Flags().Int("days", 7, "events of the last N days")
	out := cli.AddOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *days < 1 || *days > 3660 {
			return cli.Usagef("want --days from 1 to 3660")
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		evs, err := s.Events(ctx, time.Now().AddDate(0, 0, -*days))
		if err != nil {
			return err
		}
		return reports.WriteEvents(g.stdout, out.Format, evs, g.cfg.Webhooks)
	}
	return cmd
}

func newWebhooksReplayCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay EVENT_ID [--endpoint NAME]",
		Short: "send an event again now",
		Long: `replay sends an event of the last year's outbox again now, to every
endpoint that wants its type (or only --endpoint), recording each attempt.`,
		Example: "  gpumeter --config gpumeter.yaml webhooks replay EVENT_ID --endpoint billing",
		Args:    cli.OneArg("event id"),
	}
	only := cmd.Flags().String("endpoint", "", "only this endpoint")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		id := args[0]
		if len(g.cfg.Webhooks.Endpoints) == 0 {
			return cli.Usagef("no webhook endpoints in the config (webhooks.endpoints)")
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		sent, err := webhook.NewSender(g.cfg.Webhooks, s, g.logger).Replay(ctx, s, id, *only)
		for _, a := range sent {
			fmt.Fprintf(g.stdout, "delivered %s to %s (attempt %d, HTTP %d)\n", id, a.Endpoint, a.N, a.Status)
		}
		return err
	}
	return cmd
}
