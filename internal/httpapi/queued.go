package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/wire"
)

// seckillQueued is the seckill route in the queued mode (docs/api.md
// "Queued seckill"): 202 with the queued order once the broker confirmed
// it, 200 with the buyer's order (placed, queued or rejected) on a repeat.
func (a *api) seckillQueued(c *gin.Context) {
	id, ok := seckillProduct(c)
	if !ok {
		return
	}
	if !a.allow(c, "orders", a.limits.Orders, userSubject(c)) {
		return
	}
	t, accepted, err := a.queued.Accept(c.Request.Context(), who(c).UserID, id)
	if err != nil {
		writeError(c, err)
		return
	}
	status := http.StatusAccepted
	if !accepted {
		status = http.StatusOK
	}
	jsonResponse(status, ticketOf(t), orderLocation(t.Order)).asReplay(!accepted).write(c)
}

// getQueuedOrder is GET /orders/{no} in the queued mode: the order, or
// before it exists its queued or rejected state.
func (a *api) getQueuedOrder(c *gin.Context, no string) {
	t, err := a.queued.Get(c.Request.Context(), who(c).UserID, no)
	if err != nil {
		writeError(c, err)
		return
	}
	writeJSON(c, http.StatusOK, ticketOf(t))
}

func ticketOf(t order.Ticket) wire.Order {
	o := orderOf(t.Order)
	o.Reason = t.Reason
	return o
}
