package testenv

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// LogBuffer is a log sink that a server goroutine and its test share. It
// keeps the first 4 MiB: the start is what explains a failure.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 4<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// RunFunc is app.Run. The shop helper takes it as a value so that testenv
// needs no app, and app's own tests can use the helper too.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Log is where a shop under test writes its log: a LogBuffer, or a sink
// of the test's own that also watches what is written.
type Log interface {
	io.Writer
	String() string
}

// ShopOptions say how to run a shop for a test.
type ShopOptions struct {
	Args     []string            // default: serve
	Getenv   func(string) string // default: nothing set
	Log      Log                 // default: a new LogBuffer
	StopWait time.Duration       // how long Run may take to return once cancelled; default 15s
}

// Shop is a shop running in-process for a test, as the binary runs it: Run
// in a goroutine, stdout and log captured. At cleanup its context is
// cancelled and Run must return (without error) within StopWait; when the
// test failed, stdout and the log are printed.
type Shop struct {
	Stdout *LogBuffer
	Log    Log
	done   chan error
}

// StartShop starts run with o. It does not wait for the shop to be ready:
// see Until and Answers.
func StartShop(t testing.TB, run RunFunc, o ShopOptions) *Shop {
	t.Helper()
	if o.Args == nil {
		o.Args = []string{"serve"}
	}
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	if o.Log == nil {
		o.Log = &LogBuffer{}
	}
	if o.StopWait <= 0 {
		o.StopWait = 15 * time.Second
	}
	s := &Shop{Stdout: &LogBuffer{}, Log: o.Log, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.done <- run(ctx, o.Args, o.Getenv, s.Stdout, s.Log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("shop %v returned %v", o.Args, err)
			}
		case <-time.After(o.StopWait):
			t.Errorf("shop %v did not return within %v of cancel", o.Args, o.StopWait)
		}
		if t.Failed() {
			t.Logf("shop stdout:\n%s\nshop log:\n%s", s.Stdout.String(), cut(s.Log.String(), 16000))
		}
	})
	return s
}

// Until waits up to limit for ready, polling; the test fails at once if the
// shop exits first, or when the time is up. what names the wait.
func (s *Shop) Until(t testing.TB, limit time.Duration, what string, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ready() {
		select {
		case err := <-s.done:
			s.done <- err // for the cleanup
			t.Fatalf("shop exited before %s: %v\n%s", what, err, cut(s.Log.String(), 16000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v\n%s", what, limit, cut(s.Log.String(), 16000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Answers waits up to limit for GET url to answer 200.
func (s *Shop) Answers(t testing.TB, limit time.Duration, client *http.Client, url string) {
	t.Helper()
	if client == nil {
		client = http.DefaultClient
	}
	s.Until(t, limit, "200 from "+url, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "\n...(cut)"
	}
	return s
}
