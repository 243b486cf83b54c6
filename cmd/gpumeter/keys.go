package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/cli"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/reports"
)

func newKeysCmd(g *globals) *cobra.Command {
	return cli.Group(&cobra.Command{
		Use:   "keys",
		Short: "create, list and revoke API keys and portal tokens",
		Long: `keys manages the API keys of the /v1 API (docs/api.md). create prints the
new token once (gmk_ID_SECRET); only its sha256 is stored. A revoked key
stops working within 2 seconds.`,
		Example: "  gpumeter keys create --scope tenant:acme --expires 30d --note \"billing export\"\n  gpumeter keys list",
	}, newKeysCreateCmd(g), newKeysListCmd(g), newKeysRevokeCmd(g))
}

func newKeysCreateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create --scope admin|department:D|tenant:T [--expires 30d] [--portal] [--note TEXT]",
		Short: "create an API key or portal token and print it once",
		Long: `create makes a key for a scope and prints its token once on stdout; only its
sha256 is stored. --portal makes a short-lived token (it must expire, within
90 days) that may also be passed as ?access_token= for embedding in a
customer portal. --expires takes days (30d) or a Go duration (72h). A key
for a tenant that has no usage yet is created with a warning (a misspelt
tenant, say).`,
		Example: "  gpumeter keys create --scope admin --expires 720h --note ops\n" +
			"  gpumeter keys create --scope tenant:acme --portal --expires 7d",
		Args: cli.NoArgs,
	}
	fs := cmd.Flags()
	scope := fs.String("scope", "", "admin, department:NAME or tenant:NAME (required)")
	var expires auth.Lifetime
	fs.Var(&expires, "expires", "lifetime, in days (30d) or as a Go duration (720h) (default: never; required with --portal)")
	portal := fs.Bool("portal", false, "a portal token: must expire, may travel as ?access_token=")
	note := fs.String("note", "", "what the key is for")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *scope == "" {
			return cli.Usagef("--scope is required: admin, department:NAME or tenant:NAME")
		}
		sc, err := auth.ParseScope(*scope)
		if err != nil {
			return cli.Usagef("--scope: %v", err)
		}
		key, token, err := auth.NewKey(auth.NewKeyRequest{Scope: sc, Portal: *portal, Expires: time.Duration(expires), Note: *note}, time.Now())
		if err != nil {
			return cli.Usage(err)
		}
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.SaveKey(ctx, key); err != nil {
			return err
		}
		if err := reports.WriteKeyCreated(g.stderr, key); err != nil {
			return err
		}
		fmt.Fprintln(g.stdout, token)
		if sc.Kind == auth.KindTenant {
			warnUnseenTenant(ctx, g, s, sc.Name)
		}
		return nil
	}
	return cmd
}

// warnUnseenTenant warns when a key is made for a tenant that has no
// usage, in rollups or raw samples: a misspelt name, or a tenant not yet
// metered.
func warnUnseenTenant(ctx context.Context, g *globals, s *store.Store, tenant string) {
	switch seen, err := usage.Seen(ctx, s, tenant, time.Now()); {
	case err != nil:
		g.logger.Warn("could not check whether the tenant has usage", "tenant", tenant, "err", err)
	case !seen:
		g.logger.Warn("the key's tenant has no usage yet: is the name right?", "tenant", tenant)
	}
}

func newKeysListCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list [-o FORMAT]",
		Short:   "list API keys (never their tokens)",
		Long:    "list prints every key: its id, scope, kind (api or portal), when it was created, expires and was revoked, and its note.",
		Example: "  gpumeter keys list\n  gpumeter keys list -o json",
		Args:    cli.NoArgs,
	}
	out := cli.AddOutputFlag(cmd)
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
		return reports.WriteKeysAs(g.stdout, out.Format, keys)
	}
	return cmd
}

func newKeysRevokeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "revoke KEY_ID",
		Short:   "revoke an API key",
		Long:    "revoke revokes a key by its id (keys list shows them); it stops working within 2 seconds.",
		Example: "  gpumeter keys revoke 3f9c2a",
		Args:    cli.OneArg("key id"),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		s, err := openStore(ctx, g)
		if err != nil {
			return err
		}
		defer s.Close()
		k, err := s.RevokeKey(ctx, args[0], time.Now()) // an unknown key is fault.NotFound: exit 2
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "revoked %s (%s) at %s\n", k.ID, k.Scope, k.RevokedAt.Format(time.RFC3339))
		return nil
	}
	return cmd
}
