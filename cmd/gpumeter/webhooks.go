package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/webhook"
)

const webhooksHelp = `usage:
  gpumeter webhooks list [--days 7]
  gpumeter webhooks replay EVENT_ID [--endpoint NAME]

list shows the outbox: each event and, per configured endpoint, whether it
was delivered and in how many attempts. replay sends an event again now
(to every endpoint that wants its type, or one), recording each attempt;
serve delivers new events by itself. docs/webhooks.md has the signature
format and how to verify it.
`

func runWebhooks(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usageErrorf("want a subcommand: list or replay (see gpumeter webhooks -h)")
	}
	switch args[0] {
	case "list":
		return runWebhooksList(ctx, g, args[1:])
	case "replay":
		return runWebhooksReplay(ctx, g, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(g.stderr, webhooksHelp)
		return flag.ErrHelp
	}
	return usageErrorf("unknown subcommand %q: want list or replay", args[0])
}

func runWebhooksList(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("webhooks list", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	days := fs.Int("days", 7, "events of the last N days")
	pos, err := parseInvoiceFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 || *days < 1 || *days > 3660 {
		return usageErrorf("want --days from 1 to 3660 and no arguments")
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
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tTYPE\tCREATED\tDELIVERIES")
	for _, st := range evs {
		var parts []string
		for _, ep := range g.cfg.Webhooks.Endpoints {
			if !ep.Wants(st.Event.Type) {
				continue
			}
			n := len(st.Attempts[ep.Name])
			switch {
			case st.Delivered(ep.Name):
				parts = append(parts, fmt.Sprintf("%s: delivered (%d attempts)", ep.Name, n))
			case n >= g.cfg.Webhooks.MaxAttempts:
				parts = append(parts, fmt.Sprintf("%s: failed after %d attempts (replay it)", ep.Name, n))
			default:
				parts = append(parts, fmt.Sprintf("%s: pending (%d attempts)", ep.Name, n))
			}
		}
		if len(parts) == 0 {
			parts = []string{"no endpoint wants it"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", st.Event.ID, st.Event.Type, st.Event.CreatedAt.Format(time.RFC3339), strings.Join(parts, "; "))
	}
	return tw.Flush()
}

func runWebhooksReplay(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("webhooks replay", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	only := fs.String("endpoint", "", "only this endpoint")
	id, err := oneArg(fs, args, "event id")
	if err != nil {
		return err
	}
	if len(g.cfg.Webhooks.Endpoints) == 0 {
		return usageErrorf("no webhook endpoints in the config (webhooks.endpoints)")
	}
	s, err := openStore(ctx, g)
	if err != nil {
		return err
	}
	defer s.Close()
	evs, err := s.Events(ctx, time.Now().AddDate(-1, 0, 0))
	if err != nil {
		return err
	}
	var st *webhook.Status
	for i := range evs {
		if evs[i].Event.ID == id {
			st = &evs[i]
		}
	}
	if st == nil {
		return usageErrorf("event %q: not in the outbox of the last year", id)
	}
	sender := webhook.NewSender(g.cfg.Webhooks, s, g.logger)
	sent := 0
	for _, ep := range g.cfg.Webhooks.Endpoints {
		if (*only != "" && ep.Name != *only) || (*only == "" && !ep.Wants(st.Event.Type)) {
			continue
		}
		last, err := sender.Deliver(ctx, ep, st.Event, len(st.Attempts[ep.Name])+1, g.cfg.Webhooks.MaxAttempts)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "delivered %s to %s (attempt %d, HTTP %d)\n", id, ep.Name, last.N, last.Status)
		sent++
	}
	if sent == 0 {
		return usageErrorf("no endpoint to replay %s to (--endpoint %q)", id, *only)
	}
	return nil
}

// invoiceEvents puts an event for each finalized invoice in the webhook
// outbox, once per invoice however often a run finds it finalized.
func invoiceEvents(s *store.Store) func(context.Context, []*billing.Invoice) error {
	return func(ctx context.Context, invs []*billing.Invoice) error {
		_, err := webhook.AnnounceFinalized(ctx, s, invs, time.Now())
		return err
	}
}

// crossingEvents puts quota crossings in the webhook outbox.
func crossingEvents(ctx context.Context, g *globals, s *store.Store) func([]quota.Crossing) {
	return func(cs []quota.Crossing) {
		var evs []webhook.Event
		for _, c := range cs {
			ev, err := webhook.QuotaCrossed(c, time.Now())
			if err != nil {
				g.logger.Error("quota crossing event", "err", err)
				continue
			}
			evs = append(evs, ev)
		}
		if err := s.SaveEvents(ctx, evs); err != nil {
			g.logger.Error("save quota crossing events; they are lost", "events", len(evs), "err", err)
		}
	}
}
