//go:build unix

package docs

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The environment every runnable block gets, as the chapters' "before you
// start" section tells a reader to set it up.
const (
	docsAdminToken = "docs-admin-token-0123456789"
	docsAuthSecret = "docs-auth-secret-0123456789"
	defaultTimeout = 60 * time.Second
)

// shopEnv is the shop the blocks run against.
type shopEnv struct {
	root     string // repository root
	bin      string // directory holding the built shop binary
	base     string // http://127.0.0.1:port
	redisURL string // the shop's in-process Redis
	sqlite   string
	caps     map[string]capability
}

type capability struct {
	ok  bool
	why string // when not ok: what is missing, and where it gets fixed
}

// capabilityProbes decide whether blocks that need a capability can run
// against the code as it is. A block whose needs are unmet fails with the
// reason, naming what is missing.
var capabilityProbes = map[string]func(ctx context.Context, e *shopEnv) capability{
	// lab-lock: `shop lab lock` is wired to internal/lablock.
	"lab-lock": func(ctx context.Context, e *shopEnv) capability {
		cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "shop"), "lab", "lock",
			"--key", "docs-probe-"+strings.ToLower(rand.Text()[:8]), "--ttl", "1s", "--hold", "1ms", "--wait", "0s")
		cmd.Env = append(cleanEnv(), "SHOP_REDIS_URL="+e.redisURL)
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte(`"acquired"`)) {
			return capability{why: fmt.Sprintf("`shop lab lock` is not wired yet (internal/app: lab -> lablock.Run): %v: %s", err, bytes.TrimSpace(out))}
		}
		return capability{ok: true}
	},
	// redis-expiry: the in-process Redis of the embedded default expires
	// keys as time passes (miniredis needs ClockTTL(true) for that).
	"redis-expiry": func(ctx context.Context, e *shopEnv) capability {
		opt, err := redis.ParseURL(e.redisURL)
		if err != nil {
			return capability{why: err.Error()}
		}
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		key := "docs-probe:" + rand.Text()
		if err := rdb.Set(ctx, key, "1", 50*time.Millisecond).Err(); err != nil {
			return capability{why: err.Error()}
		}
		time.Sleep(200 * time.Millisecond)
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
			rdb.Del(ctx, key)
			return capability{why: "the in-process Redis never expires keys (internal/platform OpenRedis: call ClockTTL(true) on the miniredis), " +
				"so a lock whose holder stopped is never freed"}
		}
		return capability{ok: true}
	},
}

// cleanEnv is the test's environment without SHOP_* settings, which would
// otherwise leak into every shop a block starts, and without TMPDIR, which
// most readers' shells do not have (a block must not count on it).
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHOP_") && !strings.HasPrefix(kv, "SHOP=") && !strings.HasPrefix(kv, "LAB_ADDR=") && !strings.HasPrefix(kv, "ADMIN_TOKEN=") && !strings.HasPrefix(kv, "TMPDIR=") {
			out = append(out, kv)
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startShop builds the shop and starts it as a reader would: no config
// beyond a fixed admin token and fixed ports.
func startShop(t *testing.T) *shopEnv {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the docs test runs from docs/ inside the module: %v", err)
	}
	for _, tool := range readerTools {
		if _, err := exec.LookPath(tool.program); err != nil {
			t.Fatalf("the chapters' commands need %s on PATH (%s): %v", tool.program, aptInstall, err)
		}
	}
	e := &shopEnv{root: root, bin: t.TempDir(), caps: map[string]capability{}}
	build := exec.Command("go", "build", "-o", filepath.Join(e.bin, "shop"), "./cmd/shop")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shop: %v\n%s", err, out)
	}

	data := t.TempDir()
	addr, raddr := freeAddr(t), freeAddr(t)
	e.base, e.redisURL, e.sqlite = "http://"+addr, "redis://"+raddr, filepath.Join(data, "shop.db")
	logf, err := os.Create(filepath.Join(data, "shop.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(e.bin, "shop"))
	cmd.Dir = data
	cmd.Env = append(cleanEnv(),
		"SHOP_ADDR="+addr, "SHOP_EMBEDDED_REDIS_ADDR="+raddr, "SHOP_SQLITE_PATH="+e.sqlite,
		"SHOP_ADMIN_TOKEN="+docsAdminToken, "SHOP_AUTH_SECRET="+docsAuthSecret)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = dieWithTest(&syscall.SysProcAttr{})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	shopLog := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			t.Logf("shop log:\n%s", shopLog())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the shop exited at start: %v\n%s", err, shopLog())
		default:
		}
		resp, err := http.Get(e.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shop did not answer /readyz within 60s: %v\n%s", err, shopLog())
		}
		time.Sleep(100 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, probe := range capabilityProbes {
		e.caps[name] = probe(ctx, e)
	}
	return e
}

var onlyChapters = flag.String("chapters", "", "TestRunnableBlocks: run only these chapters' blocks, by number (05,08); a check while writing, not a pass")

// TestRunnableBlocks runs every runnable block of every chapter, both
// languages, against one shop: all chapters at once (in goroutines, not
// bounded by -parallel: they mostly wait), the blocks of one chapter in
// order, each language after the other in a state of its own (variables and
// functions a block defines carry over to the next block of that chapter).
// The results are then reported as subtests chapter/lang/block.
func TestRunnableBlocks(t *testing.T) {
	if *onlyChapters != "" {
		t.Logf("only the blocks of chapters %s (-chapters)", *onlyChapters)
	}
	setup := readerSetup(t)
	e := startShop(t)
	for name, c := range e.caps {
		if !c.ok {
			t.Logf("capability %s missing: %s", name, c.why)
		}
	}
	type run struct {
		c       chapter
		env     []string
		work    string
		results []blockResult
	}
	var runs [][]*run // by chapter number, then language
	byNum := map[string]int{}
	for _, lang := range langs {
		for _, c := range chapters(t, lang) {
			if *onlyChapters != "" && !slices.Contains(strings.Split(*onlyChapters, ","), c.num) {
				continue
			}
			i, ok := byNum[c.num]
			if !ok {
				i = len(runs)
				byNum[c.num] = i
				runs = append(runs, nil)
			}
			work := t.TempDir()
			runs[i] = append(runs[i], &run{c: c, work: work, env: blockEnv(e, work, freeAddr(t))})
		}
	}
	var wg sync.WaitGroup
	for _, rs := range runs {
		wg.Go(func() {
			for _, r := range rs {
				r.results = runChapter(e, r.c, setup, r.env, r.work)
			}
		})
	}
	wg.Wait()
	t.Run("metric-names", func(t *testing.T) { checkMetricNames(t, e) })

	for _, rs := range runs {
		t.Run(strings.TrimSuffix(rs[0].c.base, ".md"), func(t *testing.T) {
			for _, r := range rs {
				t.Run(r.c.lang, func(t *testing.T) {
					for _, br := range r.results {
						t.Run(fmt.Sprintf("line%d", br.b.line), func(t *testing.T) {
							if br.log != "" && br.err == nil {
								t.Log(br.log)
							}
							if br.skip != "" {
								t.Skip(br.skip)
							}
							if br.err != nil {
								t.Error(br.err)
							}
						})
					}
				})
			}
		})
	}
}

// readerSetup is the shell set-up docs/README.md tells a reader to run in
// the terminal of the commands (its one block fenced "sh setup"), followed
// by putting the test's freshly built shop first on PATH, where the
// reader's bin/shop would be.
func readerSetup(t *testing.T) string {
	t.Helper()
	blocks, _ := parse(t, "README.md")
	var found []block
	for _, b := range blocks {
		if b.info == "sh setup" {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/README.md must have exactly one block fenced as \"sh setup\" (the reader's terminal 2), has %d", len(found))
	}
	return "# docs/README.md, the reader's set-up:\n" + found[0].body + "\nexport PATH=\"$DOCS_BIN:$PATH\"\n"
}

// blockEnv is the environment of a chapter's blocks: what docs/env.sh
// would otherwise default, pointing at the test's shop.
func blockEnv(e *shopEnv, work, labAddr string) []string {
	return append(cleanEnv(),
		"SHOP="+e.base,
		"ADMIN_TOKEN="+docsAdminToken,
		"SHOP_REDIS_URL="+e.redisURL,
		"SHOP_SQLITE_PATH="+e.sqlite,
		"LAB_ADDR="+labAddr,
		"PATH="+e.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DOCS_ROOT="+e.root,
		"DOCS_BIN="+e.bin,
		"DOCS_STATE="+filepath.Join(work, "state.sh"),
	)
}

// blockResult is what became of one runnable block.
type blockResult struct {
	b    block
	log  string // the block's output, for go test -v
	skip string // why it did not run
	err  error
}

// runChapter runs a chapter's blocks in order; setup (the reader's shell
// set-up from docs/README.md) runs before the first one.
func runChapter(e *shopEnv, c chapter, setup string, env []string, work string) []blockResult {
	var out []blockResult
	failed := ""
	for _, b := range c.blocks {
		if !b.runnable {
			continue
		}
		r := blockResult{b: b}
		switch {
		case failed != "":
			r.skip = "an earlier block of this chapter failed: " + failed
		default:
			// An unmet need fails the block: the docs must never describe
			// what the code does not do, and CI must not skip quietly.
			for _, n := range b.needs {
				if c := e.caps[n]; !c.ok && r.err == nil {
					r.err = fmt.Errorf("%s needs %s: %s", b.name(), n, c.why)
					failed = b.name()
				}
			}
		}
		if r.skip == "" && r.err == nil {
			r.log, r.err = runBlock(b, setup, env, work)
			setup = "" // once per chapter: later blocks inherit its state
			if r.err != nil {
				failed = b.name()
			}
		}
		out = append(out, r)
	}
	return out
}

// prologue and epilogue wrap each block: the first restores the chapter's
// state, the second saves the variables and functions the block defined.
//
// Neither sets -e or pipefail: a block runs as it does when a reader pastes
// it into an interactive bash, so a failing command in the middle shows only
// in the output, which the expectations (and readerErrors) check.
const prologue = `declare -A __docs_seen=()
for __docs_n in $(compgen -v); do __docs_seen[$__docs_n]=1; done
if [ -f "$DOCS_STATE" ]; then source "$DOCS_STATE"; fi
cd "$DOCS_ROOT"
__docs_save() {
	local __n
	{
		for __n in $(compgen -v); do
			case $__n in
			__docs_* | BASH* | FUNCNAME | PIPESTATUS | GROUPS | LINENO | RANDOM | SRANDOM | SECONDS | EPOCH* | _ | OLDPWD | PWD | COMP_* | OPTIND | OPTARG | SHLVL) continue ;;
			esac
			if [[ -n ${__docs_seen[$__n]:-} ]]; then continue; fi
			declare -p "$__n" 2>/dev/null | grep -v '^declare -[a-zA-Z]*r' || true
		done
		declare -f | awk '/^__docs_save \(\)/{skip=1} skip&&/^}/{skip=0;next} !skip'
	} >"$DOCS_STATE.new" && mv "$DOCS_STATE.new" "$DOCS_STATE"
}
trap '__docs_status=$?; if [ $__docs_status -eq 0 ]; then __docs_save; fi' EXIT
`

// readerErrors are lines a reader would notice as a failure even when the
// block's last command succeeded.
var readerErrors = regexp.MustCompile(`(?m)(: command not found$|: syntax error|: unbound variable$|^jq: error)`)

// runBlock runs one block with plain bash (after setup, the reader's shell
// set-up, when not empty) under its timeout and checks its expectations.
// It returns the block's output for the log.
func runBlock(b block, setup string, env []string, work string) (string, error) {
	timeout := b.timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	must, mustNot, err := b.expectations()
	if err != nil {
		return "", err
	}
	script := filepath.Join(work, "block.sh")
	if err := os.WriteFile(script, []byte(prologue+setup+b.body+"\n"), 0o644); err != nil {
		return "", err
	}
	out, err := os.CreateTemp(work, "out-*")
	if err != nil {
		return "", err
	}
	defer out.Close()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.Command("bash", script)
	cmd.Env = env
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = dieWithTest(&syscall.SysProcAttr{Setpgid: true})
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", err
	}
	var once sync.Once
	killGroup := func() { once.Do(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }) }
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var runErr error
	select {
	case runErr = <-waited:
	case <-ctx.Done():
		killGroup()
		<-waited
		runErr = fmt.Errorf("timed out after %s", timeout)
	}
	// Whatever the block left running in the background ends with it.
	killGroup()
	took := time.Since(start).Round(10 * time.Millisecond)
	output, _ := os.ReadFile(out.Name())
	log := fmt.Sprintf("%s (%s):\n%s", b.name(), took, indent(string(output)))

	var problems []string
	if runErr != nil {
		problems = append(problems, "exit: "+runErr.Error())
	}
	for _, re := range must {
		if !re.Match(output) {
			problems = append(problems, "output does not match # expect: "+re.String())
		}
	}
	if m := readerErrors.Find(output); m != nil {
		problems = append(problems, fmt.Sprintf("the output shows an error a reader would see: %q", m))
	}
	for _, re := range mustNot {
		if re.Match(output) {
			problems = append(problems, "output matches # expect-not: "+re.String())
		}
	}
	if len(problems) == 0 {
		return log, nil
	}
	return log, fmt.Errorf("%s: %s\n--- block:\n%s\n--- output:\n%s", b.name(), strings.Join(problems, "; "), indent(b.body), indent(string(output)))
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (nothing)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// TestCapabilitiesProbed: every capability a block may name has a probe.
func TestCapabilitiesProbed(t *testing.T) {
	for _, c := range knownCapabilities {
		if _, ok := capabilityProbes[c]; !ok {
			t.Errorf("capability %q has no probe", c)
		}
	}
	for c := range capabilityProbes {
		if !slices.Contains(knownCapabilities, c) {
			t.Errorf("probe %q is not in knownCapabilities", c)
		}
	}
}

// checkMetricNames: every shop_* metric a chapter names exists, read from
// the test shop's /metrics after the chapters ran (so most have samples),
// or else declared in the code (a vector that got no sample yet).
func checkMetricNames(t *testing.T, e *shopEnv) {
	resp, err := http.Get(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	served := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# HELP (shop_\w+)`).FindAllStringSubmatch(string(body), -1) {
		served[m[1]] = true
	}
	var sources []string
	_ = filepath.WalkDir(filepath.Join(e.root, "internal"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			b, _ := os.ReadFile(p)
			sources = append(sources, string(b))
		}
		return nil
	})
	// declared: some file has Name: "<rest>", or Subsystem: "<sub>" and
	// Name: "<rest after sub_>" (the shop's metrics are all namespace shop).
	declared := func(name string) bool {
		rest := strings.TrimPrefix(name, "shop_")
		for _, src := range sources {
			if strings.Contains(src, `Name: "`+rest+`"`) {
				return true
			}
			for i := 1; i < len(rest); i++ {
				if rest[i] == '_' && strings.Contains(src, `Subsystem: "`+rest[:i]+`"`) && strings.Contains(src, `Name: "`+rest[i+1:]+`"`) {
					return true
				}
			}
		}
		return false
	}
	nameRE := regexp.MustCompile(`(?:^|[^$\w])(shop_[a-z_]+[a-z])`) // $shop_… is an nginx variable
	for _, lang := range langs {
		for _, c := range chapters(t, lang) {
			b, err := os.ReadFile(c.path)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, m := range nameRE.FindAllStringSubmatch(string(b), -1) {
				name := m[1]
				base := name
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suf)
				}
				if seen[base] || served[base] || served[name] || declared(base) {
					continue
				}
				seen[base] = true
				t.Errorf("%s names the metric %s, which the shop does not have (any more)", c.path, name)
			}
		}
	}
}
