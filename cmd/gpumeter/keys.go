package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
)

const keysHelp = `usage:
  gpumeter keys create --scope admin|department:D|tenant:T [--expires 720h] [--portal] [--note TEXT]
  gpumeter keys list
  gpumeter keys revoke KEY_ID

create prints the new token once (gmk_ID_SECRET); only its sha256 is
stored. --portal makes a short-lived token (it must expire, within 90
days) that may also be passed as ?access_token= for embedding in a
customer portal. A revoked key stops working within 2 seconds.
`

func runKeys(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		return usageErrorf("want a subcommand: create, list or revoke (see gpumeter keys -h)")
	}
	switch args[0] {
	case "create":
		return runKeysCreate(ctx, g, args[1:])
	case "list":
		return runKeysList(ctx, g, args[1:])
	case "revoke":
		return runKeysRevoke(ctx, g, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(g.stderr, keysHelp)
		return flag.ErrHelp
	}
	return usageErrorf("unknown subcommand %q: want create, list or revoke", args[0])
}

func runKeysCreate(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	scope := fs.String("scope", "", "admin, department:NAME or tenant:NAME (required)")
	expires := fs.Duration("expires", 0, "lifetime, e.g. 720h (default: never; required with --portal)")
	portal := fs.Bool("portal", false, "a portal token: must expire, may travel as ?access_token=")
	note := fs.String("note", "", "what the key is for")
	pos, err := parseInvoiceFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected argument %q", pos[0])
	}
	if *scope == "" {
		return usageErrorf("--scope is required: admin, department:NAME or tenant:NAME")
	}
	sc, err := auth.ParseScope(*scope)
	if err != nil {
		return usageErrorf("--scope: %v", err)
	}
	key, token, err := auth.NewKey(auth.NewKeyRequest{Scope: sc, Portal: *portal, Expires: *expires, Note: *note}, time.Now())
	if err != nil {
		return usageError{err}
	}
	s, err := openStore(ctx, g)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.SaveKey(ctx, key); err != nil {
		return err
	}
	fmt.Fprintf(g.stderr, "created key %s (%s%s); the token is shown once:\n", key.ID, key.Scope, expiryText(key))
	fmt.Fprintln(g.stdout, token)
	return nil
}

func expiryText(k auth.Key) string {
	s := ""
	if k.Portal {
		s += ", portal"
	}
	if !k.ExpiresAt.IsZero() {
		s += ", expires " + k.ExpiresAt.Format(time.RFC3339)
	}
	return s
}

func runKeysList(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("keys list", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	pos, err := parseInvoiceFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected argument %q", pos[0])
	}
	s, err := openStore(ctx, g)
	if err != nil {
		return err
	}
	defer s.Close()
	keys, err := s.Keys(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSCOPE\tKIND\tCREATED\tEXPIRES\tREVOKED\tNOTE")
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	for _, k := range keys {
		kind := "api"
		if k.Portal {
			kind = "portal"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Scope, kind, when(k.CreatedAt), when(k.ExpiresAt), when(k.RevokedAt), orDash(k.Note))
	}
	return tw.Flush()
}

func runKeysRevoke(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("keys revoke", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	id, err := oneArg(fs, args, "key id")
	if err != nil {
		return err
	}
	s, err := openStore(ctx, g)
	if err != nil {
		return err
	}
	defer s.Close()
	k, err := s.RevokeKey(ctx, id, time.Now())
	if errors.Is(err, auth.ErrUnknownKey) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "revoked %s (%s) at %s\n", k.ID, k.Scope, k.RevokedAt.Format(time.RFC3339))
	return nil
}
