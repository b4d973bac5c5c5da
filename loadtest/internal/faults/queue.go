package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/topo"
	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// The queue scenario: a queued sale (SHOP_SECKILL_MODE=queue) of one hot
// product by three shop instances on a private three-node RabbitMQ
// cluster, each instance reaching each node through a nemesis link of its
// own. In turn, while buyers are paced over the load: a consumer is
// SIGKILLed holding a batch (then restarted), the node that leads the
// quorum queue is SIGKILLed (then restarted; it rejoins), and one
// instance's links to every node (its publisher's and its consumer's) are
// black-holed past two heartbeats. Then the queue drains and the run is
// judged from the clients' records and the database: every 202 an order
// or a rejection (O3q), no order twice, no oversell, every client answered.

// queueBatchWindow is how long a consumer holds a message before placing
// it (SHOP_BATCH_WINDOW): a consumer killed at any moment of the load holds
// some. queueCut is how long the black hole lasts: past two AMQP
// heartbeats (2 s), so both the broker and the shop take the link for dead.
// queueMinLoad is the shortest load the three faults fit in.
const (
	queueBatchWindow = 1500 * time.Millisecond
	queueCut         = 6 * time.Second
	queueMinLoad     = 45 * time.Second
)

// Queue runs the queue scenario.
func Queue(ctx context.Context, h *harness.Harness) report.Scenario {
	return runner{h}.Queue(ctx)
}

// queueRun is what the faults need: the shops, the broker, the links.
type queueRun struct {
	e       *harness.Env
	broker  *topo.RabbitMQ
	links   [][]*topo.Link // links[i]: instance i's link to each node
	queue   string
	redeliv redeliveries

	closeNemesis func()
}

func (h runner) Queue(ctx context.Context) report.Scenario {
	load := max(h.O.ChaosDuration, queueMinLoad)
	stock := int64(h.O.Stock)
	users := min(h.O.Users, h.O.Stock*11/10) // the stock lasts about 90% of the load
	r := report.Scenario{Params: map[string]any{"users": users, "stock": stock, "load": load.String(), "batch_window": queueBatchWindow.String(), "cut": queueCut.String()}}
	r.Title = fmt.Sprintf("queued sale under broker faults: %d buyers over %s, %d units, a three-node RabbitMQ cluster", users, load, stock)
	if r.Error = h.Unfit("queue", 3, " (one is killed, another cut while the third sells)"); r.Error != "" {
		return r
	}
	q, err := h.startQueue(ctx)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer q.close()
	r.Setup, r.Strategy = q.e.Desc+"; RabbitMQ nodes "+q.broker.URL()+", each instance through links of its own (toxiproxy)", q.e.Strategy

	p, err := q.e.Client.CreateProduct(ctx, "queue", 990, stock, "lt-queue-"+loadgen.RandomID(6))
	if err != nil {
		r.Error = "create the hot product: " + err.Error()
		return r
	}
	cfg := h.RaceConfig(q.e, "queue")
	cfg.Users, cfg.ProductID, cfg.Stock = users, p.ID, stock
	cfg.Failover, cfg.MaxResends = true, 20
	cfg.Rate = float64(users) / load.Seconds()
	loadStart := make(chan time.Time, 1)
	faulted := make(chan []report.Fault, 1)
	go func() { faulted <- q.faults(ctx, <-loadStart, load) }()
	res, err := h.RaceClocked(ctx, cfg, loadStart)
	r.Faults = <-faulted
	if err == nil {
		err = q.e.Drain(ctx)
	}
	if err != nil {
		r.Fill(res.Records, verify.Verdict{}, err)
		return r
	}
	v, err := q.e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	r.Fill(res.Records, v, err)
	q.redeliv.add(q.e.Cluster.Metrics(ctx))
	r.Summary.Redeliveries = q.redeliv.total
	lags, err := q.lags(ctx, res.Records)
	if err != nil && r.Error == "" {
		r.Error = err.Error()
	}
	r.Summary.LagP50Ms, r.Summary.LagP99Ms = ms(loadgen.Percentile(lags, 0.5)), ms(loadgen.Percentile(lags, 0.99))
	unanswered := unansweredBuyers(res.Records)
	r.Notes = append(r.Notes, fmt.Sprintf("202 Accepted %d, accepted lost %d, duplicates %d, oversold %d, buyers never answered %d; 202 to commit p50 %.0f ms, p99 %.0f ms over %d orders; redeliveries %d",
		r.Summary.Accepted, r.Summary.AcceptedLost, v.Counts.Duplicates, v.Counts.Oversold, unanswered, r.Summary.LagP50Ms, r.Summary.LagP99Ms, len(lags), r.Summary.Redeliveries))
	r.Pass = r.Pass && r.Error == "" && r.Summary.Accepted > 0 && r.Summary.AcceptedLost == 0 && unanswered == 0 && faultsOK(r.Faults)
	return r
}

// startQueue starts the broker, a link per instance and node, and the
// shops in the queued mode.
func (h runner) startQueue(ctx context.Context) (_ *queueRun, err error) {
	q := &queueRun{queue: "loadtest." + loadgen.RandomID(8)}
	defer func() {
		if err != nil {
			q.close()
		}
	}()
	if q.broker, err = topo.StartRabbitMQ(ctx, topo.RabbitMQOptions{}); err != nil {
		return nil, err
	}
	nem, err := topo.StartNemesis(ctx)
	if err != nil {
		return nil, err
	}
	q.closeNemesis = nem.Close
	urls := make([]string, h.O.Instances)
	for i := range h.O.Instances {
		var us []string
		var ls []*topo.Link
		for j, n := range q.broker.Nodes {
			l, err := nem.Link(fmt.Sprintf("amqp-%d-%d", i+1, j+1), "", fmt.Sprintf("127.0.0.1:%d", n.Port))
			if err != nil {
				return nil, err
			}
			ls = append(ls, l)
			us = append(us, "amqp://guest:guest@"+l.Addr()+"/")
		}
		q.links = append(q.links, ls)
		urls[i] = strings.Join(us, ",")
	}
	q.e, err = h.Setup(ctx, "queue", harness.Setup{Strategy: inventory.LockFence,
		Common: []string{"SHOP_SECKILL_MODE=queue", "SHOP_QUEUE_NAME=" + q.queue, "SHOP_BATCH_WINDOW=" + queueBatchWindow.String()},
		Extra:  func(i int) []string { return []string{"SHOP_AMQP_URL=" + urls[i]} }})
	if err != nil {
		return nil, err
	}
	return q, nil
}

func (q *queueRun) close() {
	if q.e != nil {
		q.e.Close()
	}
	if q.closeNemesis != nil {
		q.closeNemesis()
	}
	if q.broker != nil {
		q.broker.Close()
	}
}

// faults strikes in turn, each at its share of the load or once the one
// before ended, whichever is later.
func (q *queueRun) faults(ctx context.Context, start time.Time, load time.Duration) []report.Fault {
	q.redeliv.add(q.e.Cluster.Metrics(ctx))
	steps := []struct {
		at  time.Duration
		run func(context.Context, *report.Fault) error
	}{
		{load / 20, q.killConsumer},
		{load * 3 / 20, q.killLeader}, // then a restart and rejoin: 15-25 s
		{load * 12 / 20, q.cutInstance},
	}
	var out []report.Fault
	for _, s := range steps {
		harness.Sleep(ctx, time.Until(start.Add(s.at)))
		f := report.Fault{Start: time.Now()}
		f.At = f.Start.Sub(start)
		if err := s.run(ctx, &f); err != nil {
			f.Err = err.Error()
		}
		// Let the messages the fault gave back be delivered again before
		// they are counted.
		harness.Sleep(ctx, 2*queueBatchWindow)
		f.End = time.Now()
		f.Lasted = f.End.Sub(f.Start)
		f.Effect = fmt.Sprintf("%d redeliveries", q.redeliv.add(q.e.Cluster.Metrics(ctx)))
		out = append(out, f)
	}
	return out
}

// killConsumer SIGKILLs instance 2 (its consumer holds a batch), then
// restarts it.
func (q *queueRun) killConsumer(ctx context.Context, f *report.Fault) error {
	f.Name, f.Target, f.Instance = "consumer killed mid-batch (SIGKILL), restarted", "instance 2", 1
	if err := q.e.Cluster.Kill(1); err != nil {
		return err
	}
	return q.e.Cluster.Restart(ctx, 1)
}

// killLeader SIGKILLs the node leading the quorum queue, restarts it and
// waits until it is a member online again.
func (q *queueRun) killLeader(ctx context.Context, f *report.Fault) error {
	f.Name = "quorum queue leader killed (SIGKILL), restarted, rejoined"
	st, err := q.broker.Quorum(ctx, q.queue)
	if err != nil {
		return err
	}
	if len(st.Members) != len(q.broker.Nodes) {
		return fmt.Errorf("queue %s has members %v, not every node", q.queue, st.Members)
	}
	f.Target = st.Leader.Name
	st.Leader.Kill()
	if err := st.Leader.Start(ctx); err != nil {
		return err
	}
	return q.broker.WaitOnline(ctx, q.queue, st.Leader, time.Minute)
}

// cutInstance black-holes instance 3's links to every node (its
// publisher's and its consumer's) for queueCut, then heals them.
func (q *queueRun) cutInstance(ctx context.Context, f *report.Fault) error {
	f.Name, f.Target, f.Instance = fmt.Sprintf("links to the broker black-holed %s", queueCut), "instance 3 -> every node", 2
	for _, l := range q.links[2] {
		if err := l.Inject(topo.Fault{Kind: topo.BlackHole}); err != nil {
			return err
		}
	}
	harness.Sleep(ctx, queueCut)
	var err error
	for _, l := range q.links[2] {
		if e := l.Heal(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// lags is, for every 202 whose order exists, the time from the 202 to
// the order's commit (0 when the commit came first).
func (q *queueRun) lags(ctx context.Context, recs []loadgen.Record) ([]time.Duration, error) {
	var rows []struct {
		OrderNo   string
		CreatedAt time.Time
	}
	if err := q.e.Backend.Db.DB.WithContext(ctx).Raw("SELECT order_no, created_at FROM orders").Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read the orders' commit times: %w", err)
	}
	committed := make(map[string]time.Time, len(rows))
	for _, o := range rows {
		committed[o.OrderNo] = o.CreatedAt
	}
	var out []time.Duration
	for _, r := range recs {
		if at, ok := committed[r.OrderNo]; ok && r.Status == 202 {
			out = append(out, max(0, at.Sub(r.End)))
		}
	}
	slices.Sort(out)
	return out, nil
}

// redeliveries sums shop_queue_redelivered_total over the instances as it
// grows: an instance restarted counts from 0 again.
type redeliveries struct {
	last  []float64
	total int64 // every one seen
}

// add takes the instances' metrics now and returns the redeliveries since
// the last call.
func (r *redeliveries) add(now []map[string]float64) int64 {
	var n float64
	for i, m := range now {
		v, ok := m["shop_queue_redelivered_total"]
		if !ok {
			continue // not answering: counted next time
		}
		for len(r.last) <= i {
			r.last = append(r.last, 0)
		}
		if v >= r.last[i] {
			n += v - r.last[i]
		} else {
			n += v // restarted
		}
		r.last[i] = v
	}
	r.total += int64(n)
	return int64(n)
}

// unansweredBuyers counts the buyers none of whose sends was answered (a
// send to a killed instance is resent to the next).
func unansweredBuyers(recs []loadgen.Record) int {
	answered := map[int64]bool{}
	for _, r := range recs {
		answered[r.UserID] = answered[r.UserID] || r.Status != 0
	}
	n := 0
	for _, ok := range answered {
		if !ok {
			n++
		}
	}
	return n
}

func faultsOK(fs []report.Fault) bool {
	return len(fs) == 3 && !slices.ContainsFunc(fs, func(f report.Fault) bool { return f.Err != "" })
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
