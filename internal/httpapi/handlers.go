package httpapi

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/payment"
	"github.com/seckill-lab/shop/internal/wire"
)

// maxID keeps ids safe in JavaScript (docs/api.md: below 2^53).
const maxID = 1 << 53

// api holds the handlers' dependencies.
type api struct {
	auth      *authn
	products  *inventory.Service
	orders    *order.Service
	payments  *payment.Service
	idem      *idem.Store
	tokens    *idem.Tokens
	audit     func(ctx context.Context, o audit.Options) (audit.Report, error)
	audits    *auditMetrics
	cursors   cursors
	noIdem    bool
	demoLogin bool
	limits    Limits
	bg        context.Context // ends when the instance stops: settle runs under it
	queued    *order.Queued   // nil: the synchronous seckill mode
}

// canonicalID is the only spelling of an id in a path: no sign, no leading
// zero, decimal digits only, so /products/01 and /products/%2B1 name nothing.
var canonicalID = regexp.MustCompile(`^[1-9][0-9]{0,15}$`)

// pathID reads a positive id path parameter; anything else names nothing (404).
func pathID(c *gin.Context, name string) (int64, error) {
	v := c.Param(name)
	id, err := strconv.ParseInt(v, 10, 64)
	if !canonicalID.MatchString(v) || err != nil || id <= 0 || id >= maxID {
		return 0, newError("not_found", "no such "+strings.TrimSuffix(name, "_id"))
	}
	return id, nil
}

func jsonResponse(status int, v any, location string) response {
	h := map[string]string{"Content-Type": "application/json"}
	if location != "" {
		h["Location"] = location
	}
	return response{status: status, header: h, body: mustJSON(v)}
}

func writeJSON(c *gin.Context, status int, v any) {
	jsonResponse(status, v, "").write(c)
}

// --- auth ---

type tokenRequest struct {
	UserID *int64 `json:"user_id"`
}

func (r tokenRequest) validate() map[string]string {
	if r.UserID == nil {
		return map[string]string{"user_id": "required"}
	}
	if *r.UserID <= 0 || *r.UserID >= maxID {
		return map[string]string{"user_id": "must be a positive integer below 2^53"}
	}
	return nil
}

func (a *api) issueToken(c *gin.Context) {
	if !a.demoLogin {
		writeError(c, newError("not_found", "demo login is off (SHOP_DEMO_LOGIN=false)"))
		return
	}
	if !a.allow(c, "login", a.limits.Login, c.ClientIP()) {
		return
	}
	var req tokenRequest
	if err := decode(c, &req, bodyRequired); err != nil {
		writeError(c, err)
		return
	}
	tok, exp, err := a.auth.issue(*req.UserID)
	if err != nil {
		writeError(c, err)
		return
	}
	writeJSON(c, http.StatusOK, wire.Login{ExpiresAt: ts(exp), Token: tok, UserID: *req.UserID})
}

// --- products ---

type createProductRequest struct {
	Name       *string `json:"name"`
	PriceCents *int64  `json:"price_cents"`
	Stock      *int64  `json:"stock"`
	FlashSale  bool    `json:"flash_sale"` // optional, default false
}

func (r createProductRequest) validate() map[string]string {
	f := map[string]string{}
	switch {
	case r.Name == nil:
		f["name"] = "required"
	case strings.TrimSpace(*r.Name) == "" || utf8.RuneCountInString(*r.Name) > 200:
		f["name"] = "must be 1 to 200 characters"
	}
	switch {
	case r.PriceCents == nil:
		f["price_cents"] = "required"
	case *r.PriceCents < 0 || *r.PriceCents > 100_000_000:
		f["price_cents"] = "must be between 0 and 100000000"
	}
	switch {
	case r.Stock == nil:
		f["stock"] = "required"
	case *r.Stock < 0 || *r.Stock > 1_000_000_000:
		f["stock"] = "must be between 0 and 1000000000"
	}
	return f
}

func (a *api) createProduct(c *gin.Context) {
	ir, err := readIdemHeaders(c, idemMode{})
	if err != nil {
		writeError(c, err)
		return
	}
	var req createProductRequest
	if err := decode(c, &req, bodyRequired); err != nil {
		writeError(c, err)
		return
	}
	a.idempotently(c, ir, req, func(ctx context.Context, hash string) (response, error) {
		ref := ""
		if ir.key != "" {
			ref = idem.Ref("P", who(c).String(), ir.key)
		} else {
			hash = ""
		}
		p, created, err := a.products.Create(ctx, *req.Name, *req.PriceCents, *req.Stock, req.FlashSale, ref, hash)
		if err != nil {
			return response{}, err
		}
		if !created && p.RequestHash != hash {
			return response{}, idem.ErrFingerprintMismatch
		}
		status := http.StatusCreated
		if !created {
			status = http.StatusOK
		}
		return jsonResponse(status, productOf(p), "/api/v1/products/"+strconv.FormatInt(p.ID, 10)).asReplay(!created), nil
	})
}

func (a *api) listProducts(c *gin.Context) {
	limit, cur, err := a.cursors.pageParams(c, "p")
	if err != nil {
		writeError(c, err)
		return
	}
	after, _ := strconv.ParseInt(cur, 10, 64)
	ps, err := a.products.List(c.Request.Context(), after, limit+1)
	if err != nil {
		writeError(c, err)
		return
	}
	out := wire.Page[wire.Product]{Items: []wire.Product{}}
	for i, p := range ps {
		if i == limit {
			next := a.cursors.sign("p:" + strconv.FormatInt(ps[i-1].ID, 10))
			out.NextCursor = &next
			break
		}
		out.Items = append(out.Items, productOf(p))
	}
	writeJSON(c, http.StatusOK, out)
}

func (a *api) getProduct(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeError(c, err)
		return
	}
	p, err := a.products.Get(c.Request.Context(), id)
	if err != nil {
		writeError(c, err)
		return
	}
	writeJSON(c, http.StatusOK, productOf(p))
}

type restockRequest struct {
	Quantity *int64 `json:"quantity"`
}

func (r restockRequest) validate() map[string]string {
	switch {
	case r.Quantity == nil:
		return map[string]string{"quantity": "required"}
	case *r.Quantity < 1 || *r.Quantity > 1_000_000:
		return map[string]string{"quantity": "must be between 1 and 1000000"}
	}
	return nil
}

func (a *api) restock(c *gin.Context) {
	keyedWrite(a, c, "id", func(ctx context.Context, req restockRequest, id int64, key, hash string) (response, error) {
		ref := idem.Ref("K", who(c).String(), strconv.FormatInt(id, 10), key)
		p, replayed, err := a.products.Restock(ctx, id, *req.Quantity, ref, hash)
		if err != nil {
			return response{}, err
		}
		return jsonResponse(http.StatusOK, productOf(p), "").asReplay(replayed), nil
	})
}

// --- orders ---

func orderLocation(o order.Order) string { return "/api/v1/orders/" + o.OrderNo }

// seckillProduct reads a seckill request: no body (or an empty one) and
// the product's id; false when it answered the request with the error.
func seckillProduct(c *gin.Context) (int64, bool) {
	var req struct{}
	if err := decode(c, &req, bodyOptional); err != nil {
		writeError(c, err)
		return 0, false
	}
	id, err := pathID(c, "product_id")
	if err != nil {
		writeError(c, err)
		return 0, false
	}
	return id, true
}

func (a *api) seckill(c *gin.Context) {
	if a.queued != nil {
		a.seckillQueued(c)
		return
	}
	id, ok := seckillProduct(c)
	if !ok {
		return
	}
	ctx, uid := c.Request.Context(), who(c).UserID
	// A product this instance knows is sold out is answered by the fast
	// path (sold_out, or the buyer's order): cheap, so not rate limited.
	// Otherwise the processed-marker read travels with the rate limit's
	// Redis trip (chk.Along): one wait for both (a request the limit
	// refuses has read its marker for nothing, in a trip it made anyway).
	chk := a.orders.CheckSeckill(ctx, uid, id)
	if !chk.SoldOut() && !a.allowWith(chk.Along(ctx), c, "orders", a.limits.Orders, userSubject(c)) {
		return
	}
	o, created, err := a.orders.PlaceSeckill(ctx, chk)
	if err != nil {
		writeError(c, nameInDoubt(err, "", id))
		return
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	jsonResponse(status, orderOf(o), orderLocation(o)).asReplay(!created).write(c)
}

type regularOrderRequest struct {
	ProductID *int64 `json:"product_id"`
	Quantity  *int64 `json:"quantity"`
}

func (r regularOrderRequest) validate() map[string]string {
	f := map[string]string{}
	switch {
	case r.ProductID == nil:
		f["product_id"] = "required"
	case *r.ProductID <= 0 || *r.ProductID >= maxID:
		f["product_id"] = "must be a positive integer"
	}
	switch {
	case r.Quantity == nil:
		f["quantity"] = "required"
	case *r.Quantity < 1 || *r.Quantity > 100:
		f["quantity"] = "must be between 1 and 100"
	}
	return f
}

func (a *api) createOrder(c *gin.Context) {
	if !a.allow(c, "orders", a.limits.Orders, userSubject(c)) {
		return
	}
	ir, err := readIdemHeaders(c, idemMode{required: true, formToken: "order"})
	if err != nil {
		writeError(c, err)
		return
	}
	var req regularOrderRequest
	if err := decode(c, &req, bodyRequired); err != nil {
		writeError(c, err)
		return
	}
	a.idempotently(c, ir, req, func(ctx context.Context, hash string) (response, error) {
		o, created, err := a.orders.Regular(ctx, who(c).UserID, *req.ProductID, *req.Quantity, ir.business(), hash)
		if err != nil {
			if errors.Is(err, inventory.ErrSoldOut) {
				err = inventory.ErrInsufficientStock // this route never answers sold_out
			}
			return response{}, nameInDoubt(err, order.RegularNo(who(c).UserID, ir.business()), 0)
		}
		if !created {
			return jsonResponse(http.StatusOK, orderOf(o), orderLocation(o)).asReplay(true), nil
		}
		return jsonResponse(http.StatusCreated, orderOf(o), orderLocation(o)), nil
	})
}

func (a *api) listOrders(c *gin.Context) {
	limit, cur, err := a.cursors.pageParams(c, "o")
	if err != nil {
		writeError(c, err)
		return
	}
	var after *order.ListCursor
	if cur != "" {
		micros, no, _ := strings.Cut(cur, ":")
		us, _ := strconv.ParseInt(micros, 10, 64)
		after = &order.ListCursor{CreatedAt: time.UnixMicro(us).UTC(), OrderNo: no}
	}
	os, err := a.orders.List(c.Request.Context(), who(c).UserID, after, limit+1)
	if err != nil {
		writeError(c, err)
		return
	}
	out := wire.Page[wire.Order]{Items: []wire.Order{}}
	for i, o := range os {
		if i == limit {
			last := os[i-1]
			next := a.cursors.sign("o:" + strconv.FormatInt(last.CreatedAt.UnixMicro(), 10) + ":" + last.OrderNo)
			out.NextCursor = &next
			break
		}
		out.Items = append(out.Items, orderOf(o))
	}
	writeJSON(c, http.StatusOK, out)
}

func (a *api) getOrder(c *gin.Context) {
	no, err := pathOrderNo(c)
	if err != nil {
		writeError(c, err)
		return
	}
	if a.queued != nil {
		a.getQueuedOrder(c, no)
		return
	}
	o, err := a.orders.Get(c.Request.Context(), who(c).UserID, no)
	if err != nil {
		writeError(c, err)
		return
	}
	writeJSON(c, http.StatusOK, orderOf(o))
}

func (a *api) cancelOrder(c *gin.Context) {
	no, err := pathOrderNo(c)
	if err != nil {
		writeError(c, err)
		return
	}
	var req struct{}
	if err := decode(c, &req, bodyOptional); err != nil {
		writeError(c, err)
		return
	}
	o, err := a.orders.Cancel(c.Request.Context(), who(c).UserID, no)
	if err != nil {
		writeError(c, err)
		return
	}
	writeJSON(c, http.StatusOK, orderOf(o))
}

func (a *api) issueFormToken(c *gin.Context) {
	if !a.allow(c, "form-tokens", a.limits.FormToken, userSubject(c)) {
		return
	}
	var req struct{}
	if err := decode(c, &req, bodyOptional); err != nil {
		writeError(c, err)
		return
	}
	tok, exp, err := a.tokens.Issue(c.Request.Context(), who(c).String(), orderFormPurpose)
	if err != nil {
		writeError(c, err)
		return
	}
	writeJSON(c, http.StatusCreated, wire.FormToken{ExpiresAt: ts(exp.UTC()), Token: tok})
}

// --- audit ---

func (a *api) runAudit(c *gin.Context) {
	var o audit.Options
	if v, ok := c.GetQuery("product_id"); ok {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 || id >= maxID {
			writeError(c, invalid(map[string]string{"product_id": "must be a positive integer"}))
			return
		}
		o.ProductID = id
	}
	r, err := a.audit(c.Request.Context(), o)
	if err != nil {
		writeError(c, err)
		return
	}
	if o.ProductID == 0 {
		a.audits.observe(r, time.Now())
	}
	writeJSON(c, http.StatusOK, r)
}
