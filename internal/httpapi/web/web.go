// Package web is the shop's demo page: plain HTML, CSS and JavaScript
// embedded in the binary, so `go run ./cmd/shop` serves it with no build
// step, no CDN and no network.
package web

import (
	"embed"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed index.html style.css app.js favicon.svg
var files embed.FS

// types are the content types of the embedded files, by extension; set
// explicitly so they never depend on the host's mime tables.
var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// csp allows only this origin: the page loads nothing from anywhere else
// and runs no inline script, so it works offline and resists injection.
const csp = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Has reports whether /assets/name is one of the page's files.
func Has(name string) bool {
	if name == "" || strings.ContainsAny(name, "/\\") || types[path.Ext(name)] == "" {
		return false
	}
	_, err := files.Open(name)
	return err == nil
}

// Handler serves the page at "/" and its files at /assets/NAME; anything
// else goes to notFound. The files change only with the binary, so browsers
// revalidate them rather than cache them.
func Handler(notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := "index.html"
		if r.URL.Path != "/" {
			name = strings.TrimPrefix(r.URL.Path, "/assets/")
			if name == r.URL.Path || !Has(name) {
				notFound.ServeHTTP(w, r)
				return
			}
		}
		b, err := files.ReadFile(name)
		if err != nil {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", types[path.Ext(name)])
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(b)
		}
	})
}
