// Package scenarios holds the golden billing scenarios: invoice runs as
// data (testdata/*.yaml: customers, price books, a usage timeline, and
// the expected lines in minor units with how each was derived), run by
// TestScenarios against the real ClickHouse. It has no code of its own.
package scenarios
