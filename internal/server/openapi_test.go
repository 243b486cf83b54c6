package server

import (
	"context"
	"encoding/json"
	"fmt"
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

// The document types every answer: each operation has a unique
// operationId; each JSON response names a schema; each object schema lists
// its properties and admits no others (or types its map values), so a
// field the server adds and the document lacks fails
// TestOpenAPIResponsesMatchTheDocument; and each authenticated operation
// documents 401, 429 and 500.
func TestOpenAPIDocumentIsTyped(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	ids := map[string]string{}
	paths, _ := doc["paths"].(map[string]any)
	for path, item := range paths {
		for method, o := range item.(map[string]any) {
			op := o.(map[string]any)
			where := strings.ToUpper(method) + " " + path
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s: no operationId", where)
			} else if other, dup := ids[id]; dup {
				t.Errorf("%s: operationId %q is %s's too", where, id, other)
			}
			ids[id] = where
			responses, _ := op["responses"].(map[string]any)
			if path != "/v1/openapi.json" {
				for _, status := range []string{"401", "429", "500"} {
					if responses[status] == nil {
						t.Errorf("%s: no %s response", where, status)
					}
				}
			}
			for status, r := range responses {
				content, _ := resolve(doc, r)["content"].(map[string]any)
				for media, m := range content {
					if _, ok := m.(map[string]any)["schema"]; !ok {
						t.Errorf("%s %s %s: no schema", where, status, media)
					}
				}
			}
		}
	}
	var walk func(where string, s any)
	walk = func(where string, v any) {
		switch s := v.(type) {
		case map[string]any:
			if s["type"] == "object" {
				_, hasProps := s["properties"].(map[string]any)
				switch extra := s["additionalProperties"].(type) {
				case bool:
					if extra || !hasProps {
						t.Errorf("%s: an object schema must list its properties and admit no others", where)
					}
				case map[string]any:
					if len(extra) == 0 {
						t.Errorf("%s: untyped map values", where)
					}
				default:
					t.Errorf("%s: an object schema without additionalProperties: false (or a typed map) is not typed", where)
				}
			}
			for k, c := range s {
				walk(where+"/"+k, c)
			}
		case []any:
			for i, c := range s {
				walk(fmt.Sprintf("%s/%d", where, i), c)
			}
		}
	}
	walk("#/components", doc["components"])
	// Responses only: a request body may be another system's type (the
	// Kubernetes AdmissionReview), which the server decodes itself.
	for path, item := range paths {
		if path == "/v1/openapi.json" {
			continue
		}
		for method, op := range item.(map[string]any) {
			walk("#/paths/"+path+"/"+method+"/responses", op.(map[string]any)["responses"])
		}
	}
}

// resolve follows a local $ref.
func resolve(doc map[string]any, v any) map[string]any {
	m, _ := v.(map[string]any)
	ref, ok := m["$ref"].(string)
	if !ok {
		return m
	}
	var cur any = doc
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		cur = cur.(map[string]any)[part]
	}
	out, _ := cur.(map[string]any)
	return out
}
