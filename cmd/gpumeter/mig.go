package main

import (
	"context"
	"errors"
)

// runMIG is replaced by the issue that builds this command.
func runMIG(ctx context.Context, g *globals, args []string) error {
	return errors.New("mig: not built yet")
}
