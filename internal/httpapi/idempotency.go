package httpapi

import (
	"context"
	"maps"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/idem"
)

// response is a rendered answer: what a handler produces and what an
// idempotency record replays byte for byte.
type response struct {
	status int
	header map[string]string
	body   []byte
	// inDoubt is the order number of a 503 outcome_unknown (regular):
	// its claim is kept until settle learns the outcome.
	inDoubt string
}

// asReplay marks r, when yes, as a replay of an earlier answer: a stored
// record's bytes, or the service finding its row already there (the
// database's replay, when Redis forgot the record).
func (r response) asReplay(yes bool) response {
	if !yes {
		return r
	}
	h := make(map[string]string, len(r.header)+1)
	maps.Copy(h, r.header)
	h[idem.HeaderReplayed] = "true"
	r.header = h
	return r
}

// maxSizedByServer is net/http's bufferBeforeChunkingSize: a body of at
// most this many bytes, written whole before the handler returns, is sent
// with a Content-Length the server counts itself; a larger one is declared
// here, or it would go chunked. Leaving the small ones to the server keeps
// an order's answer to 8 header keys, the most a Go map holds before it
// grows into a table, which net/http then clones too (2-3% of the shop's
// CPU per order).
const maxSizedByServer = 2048

func (r response) write(c *gin.Context) {
	for k, v := range r.header {
		c.Header(k, v)
	}
	if len(r.body) > maxSizedByServer {
		c.Header("Content-Length", strconv.Itoa(len(r.body)))
	}
	if st := serverTiming(c); st != "" {
		c.Header("Server-Timing", st)
	}
	c.Status(r.status)
	_, _ = c.Writer.Write(r.body)
	c.Abort()
}

// answer turns a handler's outcome into the bytes it sends.
func answer(c *gin.Context, r response, err error) response {
	if err != nil {
		return problemResponse(c, err)
	}
	return r
}

// orderFormPurpose is the purpose of the form tokens that regular orders
// accept: a token is issued for one purpose and consumed only for it.
const orderFormPurpose = "order"

// idemMode says what a route accepts.
type idemMode struct {
	required  bool   // Idempotency-Key (or form token) must be present
	formToken string // purpose of X-Form-Token when the route accepts one
}

// idemRequest is a request's idempotency identity, read from its headers
// before the body is validated (docs/api.md's order of checks).
type idemRequest struct {
	key       string // the client's Idempotency-Key, "" when none
	formToken string // X-Form-Token, "" when none
	purpose   string // what the form token must have been issued for
}

// business is the key the order number derives from.
func (r idemRequest) business() string {
	if r.formToken != "" {
		return "form:" + r.formToken
	}
	return "key:" + r.key
}

func readIdemHeaders(c *gin.Context, m idemMode) (idemRequest, error) {
	rawKey, hasKey := c.Request.Header["Idempotency-Key"]
	rawTok, hasTok := c.Request.Header["X-Form-Token"]
	if m.formToken != "" && hasTok {
		if hasKey {
			return idemRequest{}, invalid(map[string]string{"Idempotency-Key": "send either Idempotency-Key or X-Form-Token, not both"})
		}
		if len(rawTok) != 1 || rawTok[0] == "" {
			return idemRequest{}, invalid(map[string]string{"X-Form-Token": "send exactly one non-empty form token"})
		}
		return idemRequest{formToken: rawTok[0], purpose: m.formToken}, nil
	}
	if !hasKey {
		if m.required {
			return idemRequest{}, newError("idempotency_key_missing", "this route requires an Idempotency-Key header")
		}
		return idemRequest{}, nil
	}
	if len(rawKey) != 1 {
		return idemRequest{}, newError("idempotency_key_missing", "send exactly one Idempotency-Key header")
	}
	k, err := idem.ParseKey(rawKey[0])
	if err != nil {
		return idemRequest{}, newError("idempotency_key_missing", "Idempotency-Key must be 1-255 characters of A-Z a-z 0-9 - _ . :")
	}
	return idemRequest{key: k}, nil
}

// idempotently runs work at most once per (principal, method, path, key):
// claim, then replay, 409, 422, or run and record. Form tokens are consumed
// at the claim step and put back on 503 busy or 5xx. A 503 outcome_unknown
// keeps the claim (or the consumed token) until settle learns the outcome.
// req is the decoded request.
//
// When Redis cannot answer the claim, work runs unclaimed: every route
// here keeps its own record in the database (order number, payment request
// id, restock and credit references) under a unique index, so a retry is
// still answered from there and a new request meets the outage itself.
func (a *api) idempotently(c *gin.Context, ir idemRequest, req any, work func(ctx context.Context, fp string) (response, error)) {
	ctx := c.Request.Context()
	// The fingerprint of the decoded request, not of its bytes: decoding
	// is strict (exact field names, no duplicates), so two bodies that
	// mean the same compare equal and two that differ never do. Compared
	// by the Redis claim, and stored with the rows the database replays from.
	fp, err := idem.Fingerprint(c.Request.Method, c.Request.URL.Path, mustJSON(req))
	if err != nil {
		writeError(c, err)
		return
	}
	run := func() response {
		r, err := work(ctx, fp)
		return answer(c, r, err)
	}
	switch {
	case a.noIdem || (ir.key == "" && ir.formToken == ""):
		run().write(c)
	case ir.formToken != "":
		consumed, err := a.tokens.Consume(ctx, who(c).String(), ir.purpose, ir.formToken)
		if err != nil {
			writeError(c, err)
			return
		}
		done := false
		defer func() {
			if !done {
				_ = consumed.Restore(context.WithoutCancel(ctx))
			}
		}()
		r := run()
		done = r.status < 500 || r.inDoubt != ""
		if r.inDoubt != "" {
			a.settle(r.inDoubt, consumed.Restore) // kept consumed until the outcome is known
		}
		r.write(c)
	default:
		scope := idem.Scope(who(c).String(), c.Request.Method, c.Request.URL.Path, ir.key)
		var fresh response
		done, err := a.idem.Do(ctx, scope, fp, func(context.Context) idem.Record {
			fresh = run()
			return idem.Record{Status: fresh.status, Header: fresh.header, Body: fresh.body, InDoubt: fresh.inDoubt != ""}
		})
		switch {
		case err != nil && unavailable(err):
			logger(c).Warn("idempotency claim not made: Redis did not answer; the database record decides", "err", err)
			run().write(c)
		case err != nil:
			writeError(c, err)
		case done.Replayed:
			response{status: done.Record.Status, header: done.Record.Header, body: done.Record.Body}.asReplay(true).write(c)
		default:
			if done.Unsaved != nil {
				logger(c).Warn("idempotency record not kept or freed", "err", done.Unsaved)
			}
			if done.Held != nil {
				a.settle(fresh.inDoubt, done.Held.Release) // kept until the outcome is known
			}
			fresh.write(c)
		}
	}
}

// keyedWrite is the shape of an admin write made once per Idempotency-Key
// on the resource the path's param names (restock, credit): the key is
// required, the body decoded strictly, the id checked, and then do runs
// under the key with the request's fingerprint.
func keyedWrite[R any](a *api, c *gin.Context, param string, do func(ctx context.Context, req R, id int64, key, hash string) (response, error)) {
	ir, err := readIdemHeaders(c, idemMode{required: true})
	if err != nil {
		writeError(c, err)
		return
	}
	var req R
	if err := decode(c, &req, bodyRequired); err != nil {
		writeError(c, err)
		return
	}
	id, err := pathID(c, param)
	if err != nil {
		writeError(c, err)
		return
	}
	a.idempotently(c, ir, req, func(ctx context.Context, hash string) (response, error) {
		return do(ctx, req, id, ir.key, hash)
	})
}
