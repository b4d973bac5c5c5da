package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/httpapi/web"
)

// demoPage serves the embedded demo page and its assets; an unknown asset is
// the API's 404 problem.
func demoPage() gin.HandlerFunc {
	return func(c *gin.Context) {
		notFound := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			writeError(c, newError("not_found", "no route "+c.Request.URL.Path))
		})
		web.Handler(notFound).ServeHTTP(c.Writer, c.Request)
	}
}
