package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/meter"
)

// The document lists the meter table's priced meters: as properties of a
// usage point and in the meters parameter of /v1/usage. A meter added to
// the table and not to the document fails here.
func TestOpenAPIListsEveryPricedMeter(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	point := doc.Components.Schemas["UsagePoint"].Properties
	var desc string
	for _, p := range doc.Paths["/v1/usage"]["get"].Parameters {
		if p.Name == "meters" {
			desc = p.Description
		}
	}
	if desc == "" {
		t.Fatal("GET /v1/usage has no meters parameter")
	}
	for _, m := range meter.PricedMeters {
		if _, ok := point[m.Name]; !ok {
			t.Errorf("UsagePoint lacks %q", m.Name)
		}
		if !strings.Contains(desc, m.Name) {
			t.Errorf("the meters parameter does not name %q: %s", m.Name, desc)
		}
	}
}
