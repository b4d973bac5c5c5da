package scenario

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// The queue column of compare: the same seckill race against the queued
// mode (SHOP_SECKILL_MODE=queue) done right and with each of its lab
// shortcuts, on the local RabbitMQ (SHOP_AMQP_URL, default guest on
// 127.0.0.1:5672). When the race ends the consumers still hold messages
// Its consumers hold each message a while (a batch window of queueWindow):
// shortly after the sale opened, while they hold the first 202s, the
// harness SIGKILLs one instance (then restarts it) and SIGSTOPs another
// past the AMQP heartbeat (the broker takes its link for dead and delivers
// its messages again while it still holds them), lets the queue drain and
// verifies. The safe
// row must stay clean (O3q: every 202 an order or a rejection; no
// duplicate); the in-process channel and auto-ack lose accepted orders,
// the consumer without the unique order number duplicates.

// queueRows are the queue column's rows.
var queueRows = []struct {
	row, shortcut string
	safe          bool
}{
	{"queue (manual ack)", "", true},
	{"queue, in-process channel", "in-process", false},
	{"queue, auto-ack", "auto-ack", false},
	{"queue, no order number", "no-order-no", false},
}

// queueFaultStop is how long the SIGSTOPped instance stays stopped: past
// two AMQP heartbeats (2 s each), so the broker closes its link.
// queueWindow is the consumers' batch window (how long they hold a
// message before placing it) and queueFaultAt when, after the sale opened,
// the faults strike: within the first window, while the first 202s wait.
const (
	queueFaultStop = 6 * time.Second
	queueWindow    = 1500 * time.Millisecond
	queueFaultAt   = 800 * time.Millisecond
)

func amqpURL() string {
	if u := os.Getenv("SHOP_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// queueColumn runs the queue rows: safeClean, the safe row verified
// clean; unsafeCaught, every unsafe row verified with a violation.
func (h runner) queueColumn(ctx context.Context) (rows []report.CompareRow, all []loadgen.Record, safeClean, unsafeCaught bool) {
	unsafeCaught = true
	for _, q := range queueRows {
		if ctx.Err() != nil {
			break
		}
		cr, recs := h.queueRow(ctx, q.row, q.shortcut, q.safe)
		rows, all = append(rows, cr), append(all, recs...)
		clean := cr.Error == "" && len(cr.Violated) == 0
		if q.safe {
			safeClean = clean
		} else if cr.Error != "" || clean {
			unsafeCaught = false
		}
	}
	return rows, all, safeClean, unsafeCaught
}

func (h runner) queueRow(ctx context.Context, row, shortcut string, safe bool) (report.CompareRow, []loadgen.Record) {
	name := "loadtest." + loadgen.RandomID(8)
	env := []string{"SHOP_SECKILL_MODE=queue", "SHOP_AMQP_URL=" + amqpURL(), "SHOP_QUEUE_NAME=" + name, "SHOP_BATCH_WINDOW=" + queueWindow.String()}
	if shortcut != "" {
		env = append(env, "SHOP_LAB_QUEUE_SHORTCUT="+shortcut)
	}
	cr := report.CompareRow{Row: row, Strategy: inventory.LockFence, Settings: fmt.Sprintf("%v", env[3:]), Safe: safe}
	if msg := h.Unfit("compare's queue column", 2, " (one instance is killed, another stopped)"); msg != "" {
		cr.Error = msg
		return cr, nil
	}
	defer deleteQueue(name)
	e, err := h.Setup(ctx, "compare-queue-"+cmp.Or(shortcut, "safe"), harness.Setup{Strategy: inventory.LockFence, Common: env})
	if err != nil {
		cr.Error = err.Error()
		return cr, nil
	}
	defer e.Close()
	cfg := h.RaceConfig(e, "compare "+row)
	cfg.Attempts = h.O.Retries
	loadStart, raced := make(chan time.Time, 1), make(chan struct{})
	faulted := make(chan error, 1)
	go func() {
		select {
		case t := <-loadStart:
			harness.Sleep(ctx, time.Until(t.Add(queueFaultAt)))
		case <-raced: // a race too short to report progress: fault after it
		}
		faulted <- queueFaults(ctx, e)
	}()
	res, err := h.RaceClocked(ctx, cfg, loadStart)
	close(raced)
	if ferr := <-faulted; err == nil {
		err = ferr
	}
	if err == nil {
		err = e.Drain(ctx)
	}
	cr.Summary = loadgen.Summarize(res.Records)
	if err == nil {
		var v verify.Verdict
		v, err = e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
		if err == nil {
			cr.Orders, cr.Oversold, cr.Duplicates = v.Counts.Orders, v.Counts.Oversold, v.Counts.Duplicates
			cr.LostAcks, cr.Undersold, cr.AcceptedLost = v.Counts.LostAcks, v.Counts.Undersold, v.Counts.AcceptedLost
			cr.Violated, cr.Violations = v.Invariants(), v.Violations
			cr.Linearizable, cr.Linear = v.Linearizable, v.Linear
		}
	}
	for _, r := range res.Records {
		if r.Status == 202 {
			cr.Accepted++
		}
	}
	cr.Redeliveries = int64(e.MetricsNow(ctx)["shop_queue_redelivered_total"])
	if err != nil {
		cr.Error = err.Error()
	}
	return cr, res.Records
}

// queueFaults: SIGKILL instance 2 and SIGSTOP instance 1 past the
// heartbeat while they hold messages, then SIGCONT and restart (its
// buyers meanwhile go unanswered or to the other instances).
func queueFaults(ctx context.Context, e *harness.Env) error {
	if err := e.Cluster.Kill(1); err != nil {
		return fmt.Errorf("kill instance 2: %w", err)
	}
	if err := e.Cluster.Signal(0, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop instance 1: %w", err)
	}
	harness.Sleep(ctx, queueFaultStop)
	if err := e.Cluster.Signal(0, syscall.SIGCONT); err != nil {
		return fmt.Errorf("continue instance 1: %w", err)
	}
	return e.Cluster.Restart(ctx, 1)
}

func deleteQueue(name string) {
	conn, err := amqp.Dial(amqpURL())
	if err != nil {
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		_, _ = ch.QueueDelete(name, false, false, false)
	}
}
