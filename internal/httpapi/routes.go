package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// routes lists every route of the API in one screen.
func routes(r *gin.Engine, d Deps, a *api, metrics http.Handler) {
	r.GET("/healthz", healthz)
	r.GET("/readyz", readyz(d.Ready))
	r.GET("/metrics", gin.WrapH(metrics))
	r.GET("/openapi.json", openAPI)
	r.GET("/", demoPage())
	r.GET("/assets/:file", demoPage())

	v1 := r.Group("/api/v1")
	v1.POST("/auth/token", a.issueToken)
	v1.GET("/products", a.listProducts)
	v1.GET("/products/:id", a.getProduct)

	user := v1.Group("", a.auth.user())
	user.POST("/seckill/:product_id/orders", timed, a.seckill)
	user.POST("/orders", timed, a.createOrder)
	user.GET("/orders", a.listOrders)
	user.GET("/orders/:order_no", a.getOrder)
	user.POST("/orders/:order_no/cancel", a.cancelOrder)
	user.POST("/orders/:order_no/pay", a.payOrder)
	user.GET("/wallet", a.getWallet)
	user.POST("/form-tokens", a.issueFormToken)

	admin := v1.Group("/admin", a.auth.adminOnly())
	admin.POST("/products", a.createProduct)
	admin.POST("/products/:id/restock", a.restock)
	admin.POST("/wallets/:user_id/credit", a.creditWallet)
	admin.GET("/audit", a.runAudit)
	if d.LabRoutes {
		l := newLab(a, d)
		admin.GET("/lab/info", l.info)
		admin.POST("/lab/races", l.startRace)
		admin.GET("/lab/races/:race_id", l.raceProgress)
	}
}
