package topo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Nemesis is the network between processes, made to lie on demand: a
// toxiproxy server running inside this process, and one proxy (a Link)
// per connection path a test wants to fault on its own, e.g. one per shop
// instance per dependency, so one instance can be cut off from Redis while
// the others still reach it. Faults are toxiproxy's toxics, driven through
// its own client over its HTTP API on loopback.
type Nemesis struct {
	api    *toxiproxy.ApiServer
	client *toxiclient.Client
	done   chan struct{}

	mu    sync.Mutex
	links []*Link
}

// StartNemesis starts the toxiproxy server on a free loopback port and
// returns once its API answers.
func StartNemesis(ctx context.Context) (*Nemesis, error) {
	p, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(p[0])
	// The toxics log their every step through zerolog's global logger;
	// nothing else here uses zerolog.
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.New(io.Discard))
	n := &Nemesis{api: api, client: toxiclient.NewClient(addr), done: make(chan struct{})}
	go func() {
		defer close(n.done)
		_ = api.Listen(addr)
	}()
	err = poll(ctx, 10*time.Second, "toxiproxy API on "+addr, func(context.Context) error {
		select {
		case <-n.done:
			return errors.New("the toxiproxy server stopped")
		default:
		}
		_, err := n.client.Version()
		return err
	})
	if err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Link starts a proxy named name that listens on a free port of host
// ("" is 127.0.0.1) and relays to upstream (host:port).
func (n *Nemesis) Link(name, host, upstream string) (*Link, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	p, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort(host, strconv.Itoa(p[0]))
	proxy, err := n.client.CreateProxy(name, listen, upstream)
	if err != nil {
		return nil, fmt.Errorf("topo: nemesis link %s -> %s: %w", listen, upstream, err)
	}
	l := &Link{Name: name, Upstream: upstream, listen: listen, proxy: proxy}
	n.mu.Lock()
	n.links = append(n.links, l)
	n.mu.Unlock()
	return l, nil
}

// Links are the links made so far, in the order they were made.
func (n *Nemesis) Links() []*Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Link(nil), n.links...)
}

// HealAll heals every link.
func (n *Nemesis) HealAll() error {
	var errs []error
	for _, l := range n.Links() {
		errs = append(errs, l.Heal())
	}
	return errors.Join(errs...)
}

// Close stops every proxy (their connections close) and the server.
func (n *Nemesis) Close() {
	n.api.Collection.Clear() //nolint:errcheck // closing: nothing to do about it
	_ = n.api.Shutdown()
	<-n.done
}

// Kind is what a fault does to a link.
type Kind string

// The kinds of fault a link can suffer.
const (
	// Latency delays every chunk of data by Delay, plus or minus Jitter,
	// in Dir (both ways: each way delayed, a round trip twice).
	Latency Kind = "latency"
	// BlackHole swallows the data and keeps the connection open: a client
	// waits until its own timeout (toxiproxy's timeout 0).
	BlackHole Kind = "black-hole"
	// TimedClose swallows the data and closes the connection After.
	TimedClose Kind = "timed-close"
	// Reset answers data with a TCP reset After (0: at once).
	Reset Kind = "reset"
	// Bandwidth limits the link to RateKB kilobytes a second in Dir.
	Bandwidth Kind = "bandwidth"
	// Down closes the link's connections and refuses new ones.
	Down Kind = "down"
)

// Dir is which way a fault acts: towards the dependency (the requests),
// back from it (the replies), or both.
type Dir string

// The ways a fault can act.
const (
	Both Dir = ""
	Up   Dir = "up"   // client -> dependency
	Back Dir = "back" // dependency -> client
)

// Fault is one fault of a link.
type Fault struct {
	Kind          Kind
	Dir           Dir
	Delay, Jitter time.Duration // Latency
	After         time.Duration // TimedClose, Reset
	RateKB        int64         // Bandwidth
}

func (f Fault) String() string {
	var s string
	switch f.Kind {
	case Latency:
		s = fmt.Sprintf("latency %s", f.Delay)
		if f.Jitter > 0 {
			s += fmt.Sprintf(" ±%s", f.Jitter)
		}
	case TimedClose, Reset:
		s = fmt.Sprintf("%s after %s", f.Kind, f.After)
	case Bandwidth:
		s = fmt.Sprintf("bandwidth %d KB/s", f.RateKB)
	default:
		s = string(f.Kind)
	}
	switch f.Dir {
	case Up:
		s += " (requests only)"
	case Back:
		s += " (replies only)"
	}
	return s
}

// Link is one proxy of the nemesis: clients connect to Addr instead of the
// dependency, and the link's faults act on their connections alone, the
// open ones as well as new ones.
type Link struct {
	Name     string
	Upstream string
	listen   string

	mu     sync.Mutex
	proxy  *toxiclient.Proxy
	toxics []string
	fault  *Fault
}

// Addr is where clients connect (host:port).
func (l *Link) Addr() string { return l.listen }

// Inject heals the link, then makes it suffer f.
func (l *Link) Inject(f Fault) error {
	if err := l.Heal(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if f.Kind == Down {
		l.fault = &f
		return l.proxy.Disable()
	}
	typ, attrs, err := f.toxic()
	if err != nil {
		return err
	}
	streams := map[Dir][]string{Both: {"upstream", "downstream"}, Up: {"upstream"}, Back: {"downstream"}}[f.Dir]
	if f.Kind == BlackHole || f.Kind == TimedClose || f.Kind == Reset {
		// Cutting one way is cutting the connection: the toxic acts on the
		// requests, where it sees the client's data first.
		streams = []string{"upstream"}
	}
	for _, s := range streams {
		name := typ + "_" + s
		if _, err := l.proxy.AddToxic(name, typ, s, 1, attrs); err != nil {
			return fmt.Errorf("topo: %s on %s: %w", f, l.Name, err)
		}
		l.toxics = append(l.toxics, name)
	}
	l.fault = &f
	return nil
}

func (f Fault) toxic() (string, toxiclient.Attributes, error) {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	switch f.Kind {
	case Latency:
		return "latency", toxiclient.Attributes{"latency": ms(f.Delay), "jitter": ms(f.Jitter)}, nil
	case BlackHole:
		return "timeout", toxiclient.Attributes{"timeout": 0}, nil
	case TimedClose:
		if f.After <= 0 {
			return "", nil, errors.New("topo: a timed close needs After > 0 (0 is a black hole)")
		}
		return "timeout", toxiclient.Attributes{"timeout": ms(f.After)}, nil
	case Reset:
		return "reset_peer", toxiclient.Attributes{"timeout": ms(f.After)}, nil
	case Bandwidth:
		if f.RateKB <= 0 {
			return "", nil, errors.New("topo: a bandwidth limit needs RateKB > 0")
		}
		return "bandwidth", toxiclient.Attributes{"rate": f.RateKB}, nil
	}
	return "", nil, fmt.Errorf("topo: unknown fault kind %q", f.Kind)
}

// Heal removes the link's fault: data flows again and new connections are
// accepted. Connections a black hole or a close held are closed, as a
// client would find them after a real partition healed.
func (l *Link) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, name := range l.toxics {
		errs = append(errs, l.proxy.RemoveToxic(name))
	}
	l.toxics = nil
	if l.fault != nil && l.fault.Kind == Down {
		errs = append(errs, l.proxy.Enable())
	}
	l.fault = nil
	return errors.Join(errs...)
}
