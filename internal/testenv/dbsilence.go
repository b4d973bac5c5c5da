package testenv

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// SilentAfterCommit is a TCP proxy in front of MySQL that, once armed,
// makes the database stop answering at a COMMIT, as a failover that takes
// longer than a request's deadline does: the COMMIT is forwarded (the
// server commits; its OK goes nowhere) or dropped (the server sees the
// connection end and rolls back), and then, for a while, no connection
// hears anything: every client packet, on old connections and new, waits
// until the silence ends. The client cannot learn the commit's outcome
// before its deadline.
type SilentAfterCommit struct {
	Addr        string
	armed       atomic.Int32 // 0 off, 1 forward the COMMIT, 2 drop it
	silence     atomic.Int64 // nanoseconds of the next silence
	silentUntil atomic.Int64 // unix nanoseconds
	cuts        atomic.Int64
}

// StartSilentAfterCommit listens on a loopback port and forwards to target
// (host:port) until the test ends.
func StartSilentAfterCommit(t testing.TB, target string) *SilentAfterCommit {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &SilentAfterCommit{Addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				client.Close()
				continue
			}
			var muted atomic.Bool
			go CopyAnswers(client, server, &muted)
			go p.pump(client, server, &muted)
		}
	}()
	return p
}

// Arm makes the next COMMIT the cut one: forwarded or dropped, then a
// silence of d.
func (p *SilentAfterCommit) Arm(forward bool, d time.Duration) {
	p.silence.Store(int64(d))
	if forward {
		p.armed.Store(1)
	} else {
		p.armed.Store(2)
	}
}

// Cuts is how many COMMITs were cut.
func (p *SilentAfterCommit) Cuts() int64 { return p.cuts.Load() }

// Silent reports whether the silence is still on.
func (p *SilentAfterCommit) Silent() bool { return time.Now().UnixNano() < p.silentUntil.Load() }

// CopyAnswers copies a proxied server's bytes to its client, dropping them
// while muted is set (a database that stops answering): the answer half of
// the test proxies in front of MySQL.
func CopyAnswers(client, server net.Conn, muted *atomic.Bool) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && !muted.Load() {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pump copies client packets to the server one MySQL packet at a time
// (3-byte length, sequence number, payload), holding each while the
// silence is on, and cuts at an armed COMMIT.
func (p *SilentAfterCommit) pump(client, server net.Conn, muted *atomic.Bool) {
	defer server.Close()
	defer client.Close()
	head := make([]byte, 4)
	for {
		if _, err := io.ReadFull(client, head); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(append(head[:3:3], 0)))
		body := make([]byte, n)
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		for p.Silent() {
			time.Sleep(10 * time.Millisecond)
		}
		commit := n >= 7 && body[0] == 0x03 && strings.HasSuffix(string(body[1:]), "COMMIT") // a COMMIT, or a packet's last statement (dbx.Packet)
		if commit && p.armed.CompareAndSwap(2, 0) {
			p.silenceNow()
			return // never forwarded: the server sees the client vanish and rolls back
		}
		cutAfter := commit && p.armed.CompareAndSwap(1, 0)
		if cutAfter {
			muted.Store(true) // the server's OK goes nowhere
		}
		if _, err := server.Write(append(head, body...)); err != nil {
			return
		}
		if cutAfter {
			p.silenceNow()
			time.Sleep(time.Second) // the server commits (a packet runs its statements first)
			return
		}
	}
}

func (p *SilentAfterCommit) silenceNow() {
	p.silentUntil.Store(time.Now().Add(time.Duration(p.silence.Load())).UnixNano())
	p.cuts.Add(1)
}
