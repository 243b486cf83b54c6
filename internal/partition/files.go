package partition

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// FleetWindow is how far behind the newest sample a GPU's own newest
// sample may be and still count as part of the fleet read from samples
// (collectors sample every 10 s).
const FleetWindow = 10 * time.Minute

// ReadFile decodes the one YAML document at path into v (a Fleet, a
// Demand or a Plan), refusing unknown fields so that a misspelt key is an
// error, not a silently ignored setting. It does not validate v.
func ReadFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s is empty", path)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// WriteFile writes v (a Plan, or the config of Plan.MIGParted) to path as
// YAML that ReadFile reads back.
func WriteFile(path string, v any) error {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
