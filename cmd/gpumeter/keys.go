package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/auth"
)

func newKeysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "create, list and revoke API keys and portal tokens",
		Long: `keys manages the API keys of the /v1 API (docs/api.md). create prints the
new token once (gmk_ID_SECRET); only its sha256 is stored. A revoked key
stops working within 2 seconds.`,
		Example: "  gpumeter keys create --scope tenant:acme --expires 720h --note \"billing export\"\n  gpumeter keys list",
		Args:    subcommandArgs,
		RunE:    wantSubcommand,
	}
	cmd.AddCommand(newKeysCreateCmd(g), newKeysListCmd(g), newKeysRevokeCmd(g))
	return cmd
}

func newKeysCreateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create --scope admin|department:D|tenant:T [--expires 720h] [--portal] [--note TEXT]",
		Short: "create an API key or portal token and print it once",
		Long: `create makes a key for a scope and prints its token once on stdout; only its
sha256 is stored. --portal makes a short-lived token (it must expire, within
90 days) that may also be passed as ?access_token= for embedding in a
customer portal.`,
		Example: "  gpumeter keys create --scope admin --expires 720h --note ops\n" +
			"  gpumeter keys create --scope tenant:acme --portal --expires 168h",
		Args: noArgs,
	}
	fs := cmd.Flags()
	scope := fs.String("scope", "", "admin, department:NAME or tenant:NAME (required)")
	expires := fs.Duration("expires", 0, "lifetime, e.g. 720h (default: never; required with --portal)")
	portal := fs.Bool("portal", false, "a portal token: must expire, may travel as ?access_token=")
	note := fs.String("note", "", "what the key is for")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
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
	return cmd
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

func newKeysListCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "list API keys (never their tokens)",
		Long:    "list prints every key: its id, scope, kind (api or portal), when it was created, expires and was revoked, and its note.",
		Example: "  gpumeter keys list",
		Args:    noArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
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
	return cmd
}

func newKeysRevokeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "revoke KEY_ID",
		Short:   "revoke an API key",
		Long:    "revoke revokes a key by its id (keys list shows them); it stops working within 2 seconds.",
		Example: "  gpumeter keys revoke 3f9c2a",
		Args:    oneArg("key id"),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		k, err := s.RevokeKey(ctx, args[0], time.Now())
		if errors.Is(err, auth.ErrUnknownKey) {
			return usageError{err}
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "revoked %s (%s) at %s\n", k.ID, k.Scope, k.RevokedAt.Format(time.RFC3339))
		return nil
	}
	return cmd
}
