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

// A MIG SKU the book spells otherwise than usage does would price nothing
// and take a guessed weight: refused, naming the entry.
func TestQuoteRejectsANonCanonicalMIGSKU(t *testing.T) {
	data, err := os.ReadFile("../../pricing/books/gpu-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"H100-SXM5-80GB/3G.40GB", "H100-SXM5-80GB/9g.99gb"} {
		book := filepath.Join(t.TempDir(), "book.yaml")
		if err := os.WriteFile(book, []byte(strings.Replace(string(data), "H100-SXM5-80GB/3g.40gb:", bad+":", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := cli(t, "quote", "--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=10")
		if code != 2 || !strings.Contains(stderr, bad) {
			t.Errorf("%s: exit %d, stderr %q: want 2 naming the SKU", bad, code, stderr)
		}
	}
}
