package main

import (
	"context"
	"errors"
)

// runCollect is replaced by the issue that builds this command.
func runCollect(ctx context.Context, g *globals, args []string) error {
	return errors.New("collect: not built yet")
}
