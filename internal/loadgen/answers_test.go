package loadgen

import (
	"net/http"
	"testing"
)

// The typed counters a live view reads agree with the outcome names the
// reports print, answer by answer.
func TestAnswersAgreeWithOutcomes(t *testing.T) {
	t.Parallel()
	recs := []Record{
		{Status: http.StatusCreated},
		{Status: http.StatusCreated},
		{Status: http.StatusOK, Replayed: true},
		{Status: http.StatusCreated, Replayed: true}, // a replayed 201 is a replay, not an order
		{Status: http.StatusConflict, Code: "sold_out"},
		{Status: http.StatusConflict, Code: "sold_out", Replayed: true},
		{Status: http.StatusConflict, Code: "already_ordered"},
		{Status: http.StatusServiceUnavailable, Code: "busy"},
		{Status: http.StatusServiceUnavailable, Code: "unavailable"},
		{Status: 0, Err: "timeout"},
		{Status: http.StatusInternalServerError, Code: "internal"},
	}
	rec := NewRecorder(len(recs))
	for _, r := range recs {
		rec.Add(r)
	}
	got := rec.Stats().Answers
	by := Summarize(rec.Records()).ByOutcome
	want := Answers{Created: by["201"], Replayed: by["200 replay"], SoldOut: by["409 sold_out"], Busy: by["503 busy"]}
	if got != want {
		t.Fatalf("Answers = %+v, want %+v (from %v)", got, want, by)
	}
	if want != (Answers{Created: 2, Replayed: 1, SoldOut: 1, Busy: 1}) {
		t.Fatalf("outcomes %v: the fixture does not cover every counter once or more", by)
	}
}
