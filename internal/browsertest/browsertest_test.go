package browsertest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/browsertest"
)

// The dumped DOM is the page after its scripts and their fetches ran, as
// the portal tests rely on: the figure comes from a second request.
func TestHeadlessDumpsThePageAfterItsFetches(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/figure", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "42.17") })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><html><body><p id="x">–</p><script>
fetch("/figure").then(function (r) { return r.text(); }).then(function (v) {
  document.getElementById("x").textContent = v; document.body.dataset.ready = "1"; });
</script></body></html>`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dom := browsertest.Headless(t, srv.URL+"/", "--dump-dom")
	if !strings.Contains(dom, `data-ready="1"`) || !strings.Contains(dom, `<p id="x">42.17</p>`) {
		t.Errorf("the dumped DOM misses the fetched figure:\n%s", dom)
	}
}
