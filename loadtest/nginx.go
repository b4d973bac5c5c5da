package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// startNginx runs nginx with the repository's deploy/nginx.conf in front of
// shops (the compose service names shop1..shopN mapped to their addresses,
// as deploy/native.sh does, no access log) and returns its base URL and a
// stop function. exec.ErrNotFound: nginx is not installed.
func startNginx(ctx context.Context, workdir string, shops []string) (string, func(), error) {
	bin, err := nginxPath()
	if err != nil {
		return "", nil, err
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", nil, err
	}
	conf, err := os.ReadFile(filepath.Join(root, "deploy", "nginx.conf"))
	if err != nil {
		return "", nil, err
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(workdir, fmt.Sprintf("nginx-%d", len(shops)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	text, err := nginxConf(string(conf), port, shops, filepath.Join(dir, "error.log"))
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-g", "pid "+filepath.Join(dir, "nginx.pid")+"; daemon off;")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	probe := &http.Client{Timeout: time.Second} // a stuck probe must not outlast the deadline
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := probe.Get(base + "/nginx-health"); err == nil {
			resp.Body.Close()
			return base, stop, nil
		}
		select {
		case <-done:
			return "", nil, fmt.Errorf("nginx exited at start (see %s)", filepath.Join(dir, "error.log"))
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("nginx did not answer on %s within 10s", base)
		}
	}
}

// nginxConf maps deploy/nginx.conf onto loopback: nginx listens on port,
// shopN:8080 becomes the address of shops[N-1] (with one shop, every
// upstream server is that shop: the bench's one-instance baseline behind
// nginx), and the access log is off.
func nginxConf(conf string, port int, shops []string, errorLog string) (string, error) {
	n, total := 0, 0
	conf = regexp.MustCompile(`server shop(\d+):8080`).ReplaceAllStringFunc(conf, func(m string) string {
		total++
		var i int
		_, _ = fmt.Sscanf(m, "server shop%d:8080", &i)
		if len(shops) == 1 && i >= 1 {
			i = 1
		}
		if i < 1 || i > len(shops) {
			return m
		}
		n++
		return "server " + strings.TrimPrefix(shops[i-1], "http://")
	})
	if n != total || (n != len(shops) && len(shops) != 1) {
		return "", fmt.Errorf("deploy/nginx.conf: %d upstream servers, %d of them mapped onto %d shops", total, n, len(shops))
	}
	for old, repl := range map[string]string{
		"listen 8080;":                 fmt.Sprintf("listen 127.0.0.1:%d;", port),
		"access_log /dev/stdout shop;": "access_log off;",
		"error_log  /dev/stderr warn;": "error_log " + errorLog + " warn;",
	} {
		if !strings.Contains(conf, old) {
			return "", fmt.Errorf("deploy/nginx.conf: no %q to map", old)
		}
		conf = strings.ReplaceAll(conf, old, repl)
	}
	return conf, nil
}

// nginxPath finds nginx on PATH or where Debian installs it (exec.ErrNotFound:
// not installed).
func nginxPath() (string, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			return "", exec.ErrNotFound
		}
	}
	return bin, nil
}
