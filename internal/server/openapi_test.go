package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every /v1 route the server registers is in the OpenAPI document, and
// every path of the document is a registered route.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q, want 3.x", doc.OpenAPI)
	}
	reg := prometheus.NewRegistry()
	s := New(DefaultConfig(), reg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	wait := s.MountAPI(ctx, reg, API{})
	defer func() { cancel(); wait() }()

	param := regexp.MustCompile(`[:*]([A-Za-z_]+)`)
	var routes, documented []string
	for _, r := range s.engine.Routes() {
		if strings.HasPrefix(r.Path, "/v1/") {
			routes = append(routes, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
		}
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(routes)
	sort.Strings(documented)
	if strings.Join(routes, "\n") != strings.Join(documented, "\n") {
		t.Fatalf("routes and the OpenAPI document differ:\nroutes:\n  %s\ndocumented:\n  %s",
			strings.Join(routes, "\n  "), strings.Join(documented, "\n  "))
	}
}
