package server

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/gin-gonic/gin"
)

// portalFiles is the customer portal: static files that call the /v1 API
// with a portal token from the URL fragment. It needs no other server.
//
//go:embed portal
var portalFiles embed.FS

// mountPortal serves the portal under /portal/ with a strict content
// policy: its own scripts and styles, API calls to this origin only.
func (s *Server) mountPortal() {
	sub, err := fs.Sub(portalFiles, "portal")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/portal/", http.FileServer(http.FS(sub)))
	s.engine.GET("/portal", func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/portal/") })
	s.engine.GET("/portal/*file", func(c *gin.Context) {
		h := c.Writer.Header()
		// frame-ancestors *: embedding in a customer's own portal is the point.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; base-uri 'none'; object-src 'none'; form-action 'none'; frame-ancestors *")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(c.Writer, c.Request)
	})
}
