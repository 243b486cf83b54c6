package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestQuoteRejectsBookWeightThatDisagreesWithTable(t *testing.T) {
	data, err := os.ReadFile("../../pricing/books/gpu-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const good = "H100-SXM5-80GB/3g.40gb:\n    weight: 3/7"
	if !strings.Contains(string(data), good) {
		t.Fatalf("example book lost its H100 3g SKU with weight 3/7")
	}
	book := filepath.Join(t.TempDir(), "book.yaml")
	wrong := strings.Replace(string(data), good, "H100-SXM5-80GB/3g.40gb:\n    weight: 2/7", 1)
	if err := os.WriteFile(book, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli(t, "quote", "--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=10")
	if code != 2 || !strings.Contains(stderr, "weight") {
		t.Fatalf("exit %d, stderr %q: want 2 naming the weight", code, stderr)
	}
	code, out, stderr := cli(t, "quote", "--book", "../../pricing/books/gpu-cloud.yaml", "--quantity", "H100-SXM5-80GB:gpu_hours=10")
	if code != 0 || out == "" {
		t.Fatalf("good book: exit %d, %q %q", code, out, stderr)
	}
}
