package main

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// maxNotifications bounds what an inbox keeps: a CI stage gets a handful.
const maxNotifications = 10_000

// inbox keeps the webhook notifications it was POSTed, in arrival order.
type inbox struct {
	mu            sync.Mutex
	notifications []json.RawMessage
}

// ServeHTTP takes POST /alerts (one notification, JSON) and answers GET
// /alerts with every notification kept, as a JSON array.
func (b *inbox) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/alerts" {
		http.NotFound(w, req)
		return
	}
	switch req.Method {
	case http.MethodPost:
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, 1<<20))
		if err != nil || !json.Valid(body) {
			http.Error(w, "want one webhook notification, JSON", http.StatusBadRequest)
			return
		}
		b.keep(body)
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(b.all())
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
	}
}

func (b *inbox) keep(n json.RawMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.notifications) < maxNotifications {
		b.notifications = append(b.notifications, n)
	}
}

func (b *inbox) all() []json.RawMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]json.RawMessage{}, b.notifications...)
}
