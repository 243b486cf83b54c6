package main

import (
	"context"
	"errors"
)

// runQuote is replaced by the issue that builds this command.
func runQuote(ctx context.Context, g *globals, args []string) error {
	return errors.New("quote: not built yet")
}
