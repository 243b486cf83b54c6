package main

import (
	"context"
	"errors"
)

func runMigrate(ctx context.Context, g *globals, args []string) error { return errors.New("not built yet") }
func runImport(ctx context.Context, g *globals, args []string) error  { return errors.New("not built yet") }
func runUsage(ctx context.Context, g *globals, args []string) error   { return errors.New("not built yet") }
func runDemo(ctx context.Context, g *globals, args []string) error    { return errors.New("not built yet") }
