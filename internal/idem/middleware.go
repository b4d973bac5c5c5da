package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// MiddlewareOptions configures Middleware. Only the store is required.
type MiddlewareOptions struct {
	// Principal names who is asking (user id, "admin"); keys are scoped to
	// it. Default "": every client shares one key space.
	Principal func(*http.Request) string
	// Route names what is asked; default r.URL.Path (the concrete path).
	Route func(*http.Request) string
	// Required makes a missing key an error; otherwise such requests pass
	// through untouched.
	Required bool
	// OnError answers a request the middleware refuses: ErrKeyMissing,
	// ErrKeyMalformed, ErrInvalidJSON, ErrFingerprintMismatch, ErrInUse, a
	// body read error (*http.MaxBytesError for 413) or a Redis error. Check
	// with errors.Is/As. Default: a bare application/problem+json answer.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// OnStoreError hears of a failed Complete or Release after the handler
	// ran (the response is already sent); ErrClaimLost means Lease is too
	// short. Default: ignored. Which statuses are kept is ShouldStore's
	// call, the one policy.
	OnStoreError func(r *http.Request, err error)
	// Headers are the response headers kept and replayed; default
	// Content-Type and Location.
	Headers []string
	// Wait is how long a request whose key is in flight waits for the first
	// one to finish (and then replays it) before answering 409. Default 0:
	// 409 at once, as the IETF draft describes; a waiting request holds a
	// connection and a goroutine, and clients retry anyway.
	Wait time.Duration
}

// pollInterval is how often a waiting request looks at an in-flight key.
const pollInterval = 50 * time.Millisecond

// Middleware makes POST-like handlers idempotent with the Idempotency-Key
// header: the first request runs and its response (status, kept headers,
// body) is stored if ShouldStore says so; the same request again gets those
// bytes back with Idempotent-Replayed: true. The body is read once to take
// the fingerprint and handed to the handler unchanged; limit its size
// upstream (http.MaxBytesReader). It is Store.Do around an http.Handler: a
// panic or an unstored status releases the key, and the panic goes on.
func Middleware(s *Store, o MiddlewareOptions) func(http.Handler) http.Handler {
	if o.Route == nil {
		o.Route = func(r *http.Request) string { return r.URL.Path }
	}
	if o.Principal == nil {
		o.Principal = func(*http.Request) string { return "" }
	}
	if o.OnError == nil {
		o.OnError = defaultOnError
	}
	if o.OnStoreError == nil {
		o.OnStoreError = func(*http.Request, error) {}
	}
	if o.Headers == nil {
		o.Headers = []string{"Content-Type", "Location"}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			vals := r.Header.Values(HeaderKey)
			if len(vals) == 0 && !o.Required {
				next.ServeHTTP(w, r)
				return
			}
			key, err := parseKeyValues(vals)
			if err != nil {
				o.OnError(w, r, err)
				return
			}
			body, err := readBody(r)
			if err != nil {
				o.OnError(w, r, err)
				return
			}
			route := o.Route(r)
			fp, err := Fingerprint(r.Method, route, body)
			if err != nil {
				o.OnError(w, r, err)
				return
			}
			scope := Scope(o.Principal(r), r.Method, route, key)
			done, err := doWaiting(r.Context(), s, scope, fp, o.Wait, func(context.Context) Record { return o.record(w, r, next) })
			if err != nil {
				o.OnError(w, r, err)
				return
			}
			if done.Replayed {
				replay(w, &done.Record)
				return
			}
			if done.Unsaved != nil {
				o.OnStoreError(r, done.Unsaved)
			}
		})
	}
}

// record runs the handler, passing its response through, and returns a
// copy of it as a Record (the kept headers only).
func (o *MiddlewareOptions) record(w http.ResponseWriter, r *http.Request, next http.Handler) Record {
	rw := &recorder{ResponseWriter: w}
	next.ServeHTTP(rw, r)
	status := rw.status
	if status == 0 {
		status = http.StatusOK
	}
	h := rw.header
	if h == nil { // nothing written: net/http sends 200 with these headers
		h = w.Header()
	}
	rec := Record{Status: status, Header: map[string]string{}, Body: rw.body.Bytes()}
	for _, name := range o.Headers {
		if v := h.Get(name); v != "" {
			rec.Header[name] = v
		}
	}
	return rec
}

// parseKeyValues accepts exactly one header line; two are ambiguous.
func parseKeyValues(vals []string) (string, error) {
	switch len(vals) {
	case 0:
		return "", ErrKeyMissing
	case 1:
		return ParseKey(vals[0])
	}
	return "", fmt.Errorf("%w: %d %s headers", ErrKeyMalformed, len(vals), HeaderKey)
}

// readBody reads the body once and puts an equal one back for the handler.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// doWaiting is Store.Do that, for up to wait, polls a key in flight.
func doWaiting(ctx context.Context, s *Store, scope, fp string, wait time.Duration, work func(context.Context) Record) (Done, error) {
	deadline := time.Now().Add(wait)
	for {
		done, err := s.Do(ctx, scope, fp, work)
		left := time.Until(deadline)
		if !errors.Is(err, ErrInUse) || left <= 0 {
			return done, err
		}
		t := time.NewTimer(min(left, pollInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return Done{}, err
		case <-t.C:
		}
	}
}

func replay(w http.ResponseWriter, rec *Record) {
	for k, v := range rec.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set(HeaderReplayed, "true")
	w.WriteHeader(rec.Status)
	w.Write(rec.Body)
}

// recorder passes the response through and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	status int
	header http.Header // snapshot taken when the status is sent
	body   bytes.Buffer
}

func (rw *recorder) WriteHeader(code int) {
	if rw.status == 0 && code >= 200 {
		rw.status = code
		rw.header = rw.ResponseWriter.Header().Clone()
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *recorder) Write(b []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	rw.body.Write(b)
	return rw.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

func defaultOnError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, ErrKeyMissing), errors.Is(err, ErrKeyMalformed), errors.Is(err, ErrInvalidJSON):
		status = http.StatusBadRequest
	case errors.Is(err, ErrInUse):
		status = http.StatusConflict
	case errors.Is(err, ErrFingerprintMismatch):
		status = http.StatusUnprocessableEntity
	case errors.As(err, &tooBig):
		status = http.StatusRequestEntityTooLarge
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"title":"%s","status":%d}`, http.StatusText(status), status)
}
