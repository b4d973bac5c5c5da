package httpapi

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/payment"
	"github.com/seckill-lab/shop/internal/wire"
)

// --- wallet and payment ---

func walletOf(w payment.Wallet) wire.Wallet {
	return wire.Wallet{UserID: w.UserID, BalanceCents: w.BalanceCents}
}

func (a *api) getWallet(c *gin.Context) {
	w, err := a.payments.Wallet(c.Request.Context(), who(c).UserID)
	if err != nil {
		writeError(c, err)
		return
	}
	writeJSON(c, http.StatusOK, walletOf(w))
}

type creditRequest struct {
	AmountCents *int64 `json:"amount_cents"`
}

func (r creditRequest) validate() map[string]string {
	switch {
	case r.AmountCents == nil:
		return map[string]string{"amount_cents": "required"}
	case *r.AmountCents < 1 || *r.AmountCents > payment.MaxCreditCents:
		return map[string]string{"amount_cents": "must be between 1 and 1000000000"}
	}
	return nil
}

func (a *api) creditWallet(c *gin.Context) {
	keyedWrite(a, c, "user_id", func(ctx context.Context, req creditRequest, id int64, key, hash string) (response, error) {
		w, replayed, err := a.payments.Credit(ctx, id, *req.AmountCents, payment.CreditRef(who(c).String(), id, key), hash)
		if err != nil {
			return response{}, err
		}
		return jsonResponse(http.StatusOK, walletOf(w), "").asReplay(replayed), nil
	})
}

func (a *api) payOrder(c *gin.Context) {
	no, err := pathOrderNo(c)
	if err != nil {
		writeError(c, err)
		return
	}
	if !a.allow(c, "pay", a.limits.Pay, userSubject(c)) {
		return
	}
	ir, err := readIdemHeaders(c, idemMode{required: true})
	if err != nil {
		writeError(c, err)
		return
	}
	var req struct{}
	if err := decode(c, &req, bodyOptional); err != nil {
		writeError(c, err)
		return
	}
	a.idempotently(c, ir, req, func(ctx context.Context, hash string) (response, error) {
		res, err := a.payments.Pay(ctx, payment.PayRequest{UserID: who(c).UserID, OrderNo: no, Key: ir.key, RequestHash: hash})
		if err != nil {
			return response{}, err
		}
		return jsonResponse(http.StatusOK, orderOf(res.Order), "").asReplay(res.Replayed), nil
	})
}
