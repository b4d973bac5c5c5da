package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestInboxKeepsNotifications(t *testing.T) {
	srv := httptest.NewServer(&inbox{})
	defer srv.Close()
	for _, body := range []string{`{"status":"firing"}`, `{"status":"resolved"}`} {
		resp, err := http.Post(srv.URL+"/alerts", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST %s: %d, want 204", body, resp.StatusCode)
		}
	}
	resp, err := http.Post(srv.URL+"/alerts", "application/json", strings.NewReader("not json"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST not json: %d, want 400", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []struct{ Status string }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Status != "firing" || got[1].Status != "resolved" {
		t.Errorf("GET /alerts = %+v, want firing then resolved", got)
	}
}
