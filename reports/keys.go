package reports

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
)

// WriteKeyCreated says which key was made, for the line before its token
// (shown once).
func WriteKeyCreated(w io.Writer, k auth.Key) error {
	more := ""
	if k.Portal {
		more += ", portal"
	}
	if !k.ExpiresAt.IsZero() {
		more += ", expires " + k.ExpiresAt.Format(time.RFC3339)
	}
	_, err := fmt.Fprintf(w, "created key %s (%s%s); the token is shown once:\n", k.ID, k.Scope, more)
	return err
}

// WriteKeys lists keys as a table: id, scope, kind (api or portal), when
// each was created, expires and was revoked, and its note; never a token.
func WriteKeys(w io.Writer, keys []auth.Key) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSCOPE\tKIND\tCREATED\tEXPIRES\tREVOKED\tNOTE")
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	for _, k := range keys {
		kind, note := "api", k.Note
		if k.Portal {
			kind = "portal"
		}
		if note == "" {
			note = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Scope, kind, when(k.CreatedAt), when(k.ExpiresAt), when(k.RevokedAt), note)
	}
	return tw.Flush()
}
