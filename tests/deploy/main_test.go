package deploy

import (
	"testing"

	"github.com/gpumeter/gpumeter/tests/harness"
)

// TestMain removes the gpumeter binary the tests built.
func TestMain(m *testing.M) { harness.Main(m) }
