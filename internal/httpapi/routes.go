package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// routes lists every route of the API in one screen.
func routes(r *gin.Engine, d Deps, metrics http.Handler) {
	r.GET("/healthz", healthz)
	r.GET("/readyz", readyz(d.Ready))
	r.GET("/metrics", gin.WrapH(metrics))
}
