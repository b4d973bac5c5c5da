package shops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/internal/topo"

	"github.com/seckill-lab/shop/internal/loadgen"
)

// startNginx starts nginx with the repository's deploy/nginx.conf in
// front of shops (exec.ErrNotFound: nginx is not installed).
func StartNginx(ctx context.Context, workdir string, shops []string) (*topo.Nginx, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	conf, err := os.ReadFile(filepath.Join(root, "deploy", "nginx.conf"))
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(workdir, fmt.Sprintf("nginx-%d", len(shops)))
	return topo.StartNginx(ctx, topo.NginxOptions{Dir: dir, Conf: string(conf), Shops: shops})
}

func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// cluster is N shop processes on loopback ports sharing one backend.
type Cluster struct {
	Bin       string
	Backend   *Backend
	Admin     string
	Secret    string
	Workdir   string
	Name      string
	Instances []*Instance
	Client    *loadgen.Client
	Common    []string // the settings every instance was started with
}

// instance is one shop process; restarts keep its port.
type Instance struct {
	Idx     int
	Host    string   // the address it listens on ("" is 127.0.0.1)
	Prefix  []string // what its command runs after (e.g. ip netns exec NAME); nil: nothing
	Port    int
	Env     []string
	CPU     float64      // the CPUs its cgroup allows it (0: no cap)
	cap     *topo.CPUCap // that cgroup, made at its first start
	cmd     *exec.Cmd
	LogPath string
	Starts  int
	mu      sync.Mutex
	Exited  chan struct{}
}

func (i *Instance) Url() string {
	return fmt.Sprintf("http://%s:%d", cmp.Or(i.Host, "127.0.0.1"), i.Port)
}

// Placement puts an instance somewhere other than loopback: it listens on
// Host, and its command runs after Prefix (a network namespace's ip netns
// exec NAME); with CPU above 0, it runs in a cgroup of its own that allows
// it that many CPUs, as on a host of its own.
type Placement struct {
	Host   string
	Prefix []string
	CPU    float64
}

// withBuckets adds stock buckets to a cluster's settings: SHOP_STOCK_BUCKETS=k
// for every instance, and SHOP_HOME_BUCKET=i for instance i, so each of k
// instances starts at its own bucket (docs chapter 9). k <= 1 adds nothing.
func WithBuckets(k int, common []string, extra func(i int) []string) ([]string, func(i int) []string) {
	if k <= 1 {
		return common, extra
	}
	common = append(slices.Clone(common), "SHOP_STOCK_BUCKETS="+strconv.Itoa(k))
	return common, func(i int) []string {
		var own []string
		if extra != nil {
			own = extra(i)
		}
		return append(own, "SHOP_HOME_BUCKET="+strconv.Itoa(i))
	}
}

// StartPlaced starts n instances; extra(i) is instance i's own settings,
// and place(i) where it runs (nil: all on loopback, uncapped).
func StartPlaced(ctx context.Context, bin string, b *Backend, n int, name, workdir string, common []string, extra func(i int) []string, place func(i int) Placement) (*Cluster, error) {
	c := &Cluster{Bin: bin, Backend: b, Admin: "lt-admin-" + loadgen.RandomID(12), Secret: "lt-secret-" + loadgen.RandomID(16), Workdir: workdir, Name: name, Common: common}
	var urls []string
	for i := range n {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		var pl Placement
		if place != nil {
			pl = place(i)
		}
		env := append([]string{
			"SHOP_ADDR=" + cmp.Or(pl.Host, "127.0.0.1") + ":" + strconv.Itoa(port),
			"SHOP_ADMIN_TOKEN=" + c.Admin, "SHOP_AUTH_SECRET=" + c.Secret,
			"SHOP_LOG_LEVEL=warn",
			// The harness stands in for thousands of buyers' devices: it
			// names each buyer's (simulated) address when logging in, and
			// its shops trust it to, so the per-address login limit sees a
			// sale, not one client.
			"SHOP_TRUSTED_PROXIES=127.0.0.1",
		}, b.Env()...)
		env = append(env, common...)
		if extra != nil {
			env = append(env, extra(i)...)
		}
		inst := &Instance{Idx: i, Host: pl.Host, Prefix: pl.Prefix, CPU: pl.CPU, Port: port, Env: env, LogPath: filepath.Join(workdir, fmt.Sprintf("%s-shop-%d.log", name, i+1))}
		c.Instances = append(c.Instances, inst)
		urls = append(urls, inst.Url())
	}
	c.Client = loadgen.NewClient(urls, c.Admin, 256)
	for _, inst := range c.Instances {
		if err := c.Start(inst); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.Ready(ctx, 60*time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) Urls() []string {
	out := make([]string, len(c.Instances))
	for i, inst := range c.Instances {
		out[i] = inst.Url()
	}
	return out
}

// shopEnv is the harness's environment without any SHOP_ setting, so only
// what a scenario sets reaches the shops, and without GOMAXPROCS, which
// would win over the SHOP_MAXPROCS the bench gives each instance.
func ShopEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHOP_") && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			out = append(out, kv)
		}
	}
	return out
}

func (c *Cluster) Start(inst *Instance) error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	logf, err := os.OpenFile(inst.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	inst.Starts++
	fmt.Fprintf(logf, "--- start %d at %s\n", inst.Starts, time.Now().Format(time.RFC3339Nano))
	argv := append(slices.Clone(inst.Prefix), c.Bin, "serve")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(ShopEnv(), inst.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", c.Bin, err)
	}
	inst.cmd = cmd
	if err := inst.capCPU(c.Name); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	inst.Exited = exited
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	return nil
}

// ready waits for every instance's /readyz, failing early when one exits.
func (c *Cluster) Ready(ctx context.Context, limit time.Duration) error {
	for _, inst := range c.Instances {
		if err := c.ReadyOne(ctx, inst, limit); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) ReadyOne(ctx context.Context, inst *Instance, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		a := c.Client.Do(ctx, loadgen.Call{Target: inst.Idx, Method: "GET", Path: "/readyz", Timeout: 2 * time.Second})
		if a.Status == 200 {
			return nil
		}
		select {
		case <-inst.Exited:
			return fmt.Errorf("shop instance %d exited before it was ready; its log %s ends:\n%s", inst.Idx+1, inst.LogPath, Tail(inst.LogPath, 15))
		case <-ctx.Done():
			return fmt.Errorf("shop instance %d not ready after %s (log %s):\n%s", inst.Idx+1, limit, inst.LogPath, Tail(inst.LogPath, 15))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// signal sends sig to instance i.
func (c *Cluster) Signal(i int, sig syscall.Signal) error {
	inst := c.Instances[i]
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.cmd == nil || inst.cmd.Process == nil {
		return errors.New("not running")
	}
	return inst.cmd.Process.Signal(sig)
}

// kill SIGKILLs instance i and waits for it to be gone.
func (c *Cluster) Kill(i int) error {
	if err := c.Signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	<-c.Instances[i].Exited
	return nil
}

// restart starts instance i again and waits until it is ready. A start
// that fails (e.g. the database refusing connections for a moment) is tried
// again, up to five times.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	var err error
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		if err = c.Start(c.Instances[i]); err != nil {
			continue
		}
		if err = c.ReadyOne(ctx, c.Instances[i], 60*time.Second); err == nil {
			return nil
		}
		_ = c.Signal(i, syscall.SIGKILL)
		<-c.Instances[i].Exited
	}
	return err
}

// capCPU puts a started instance in its CPU cgroup, made at its first
// start (a restart joins the same one).
func (i *Instance) capCPU(cluster string) error {
	if i.CPU <= 0 {
		return nil
	}
	if i.cap == nil {
		c, err := topo.NewCPUCap(fmt.Sprintf("shop-%s-%d-%s", cluster, i.Idx+1, loadgen.RandomID(4)), i.CPU)
		if err != nil {
			return err
		}
		i.cap = c
	}
	return i.cap.Add(i.cmd.Process.Pid)
}

// CPUQuota reads an instance's cap back, as text for a person and as the
// fraction of a core for a tool: "" and 0 when it has none (or it is
// unreadable, which the text says).
func (i *Instance) CPUQuota() (string, float64) {
	if i.cap == nil {
		return "", 0
	}
	quota, period, cpus, err := i.cap.Quota()
	if err != nil {
		return "unreadable: " + err.Error(), 0
	}
	return fmt.Sprintf("%.2f CPU (cpu.cfs_quota_us %d / cpu.cfs_period_us %d)", cpus, quota, period), cpus
}

// close stops every instance: SIGCONT (a stopped one cannot exit), SIGTERM,
// then SIGKILL after 10s, and removes their CPU cgroups.
func (c *Cluster) Close() {
	defer func() {
		for _, inst := range c.Instances {
			if inst.cap != nil {
				inst.cap.Close()
			}
		}
	}()
	for i, inst := range c.Instances {
		if inst.cmd == nil {
			continue
		}
		_ = c.Signal(i, syscall.SIGCONT)
		_ = c.Signal(i, syscall.SIGTERM)
	}
	for i, inst := range c.Instances {
		if inst.cmd == nil {
			continue
		}
		select {
		case <-inst.Exited:
		case <-time.After(10 * time.Second):
			_ = c.Signal(i, syscall.SIGKILL)
			<-inst.Exited
		}
	}
}

// metrics scrapes the shop_ metrics of every running instance.
func (c *Cluster) Metrics(ctx context.Context) []map[string]float64 {
	out := make([]map[string]float64, len(c.Instances))
	for i := range c.Instances {
		m, err := c.Client.Metrics(ctx, i, "shop_")
		if err == nil {
			out[i] = m
		}
	}
	return out
}

// tail returns the last n lines of a file.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// moduleRoot is the directory of this module's go.mod (the harness runs
// from inside the repository).
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module (run the harness from the repository)")
	}
	return filepath.Dir(gomod), nil
}

// buildShop builds the shop binary from this module into dir.
func Build(ctx context.Context, dir string) (string, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "shop")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/shop")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -o %s ./cmd/shop: %w\n%s", bin, err, b)
	}
	return bin, nil
}

// StartCount is how many times the instance was started (1 + restarts).
func (i *Instance) StartCount() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.Starts
}

// PID is the process id of the instance's current process.
func (i *Instance) PID() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.cmd.Process.Pid
}
