package topo

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

// NginxOptions configure StartNginx.
type NginxOptions struct {
	Dir   string   // its configuration, pid file and error log
	Conf  string   // the text of deploy/nginx.conf
	Shops []string // base URLs of the shops, shop1..shopN of Conf
}

// Nginx is nginx with the repository's deploy/nginx.conf in front of shops
// on loopback: the compose service names shop1..shopN mapped to their
// addresses, as deploy/native.sh does, no access log.
type Nginx struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartNginx starts nginx and returns once /nginx-health answers.
// exec.ErrNotFound: nginx is not installed.
func StartNginx(ctx context.Context, o NginxOptions) (*Nginx, error) {
	bin, err := nginxPath()
	if err != nil {
		return nil, err
	}
	p, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	text, err := nginxConf(o.Conf, p[0], o.Shops, filepath.Join(o.Dir, "error.log"))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(o.Dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-p", o.Dir, "-c", path, "-g", "pid "+filepath.Join(o.Dir, "nginx.pid")+"; daemon off;")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &Nginx{url: fmt.Sprintf("http://127.0.0.1:%d", p[0]), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(n.done) }()
	probe := &http.Client{Timeout: time.Second} // a stuck probe must not outlast the deadline
	err = poll(ctx, 10*time.Second, "nginx answering on "+n.url, func(context.Context) error {
		select {
		case <-n.done:
			return fmt.Errorf("nginx exited at start (see %s)", filepath.Join(o.Dir, "error.log"))
		default:
		}
		resp, err := probe.Get(n.url + "/nginx-health")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
	if err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// URL is nginx's base URL.
func (n *Nginx) URL() string { return n.url }

// Close stops nginx gracefully (SIGQUIT), killing it after 5 s.
func (n *Nginx) Close() {
	_ = n.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
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

// NginxInstalled reports whether nginx is on PATH or where Debian puts it.
func NginxInstalled() bool {
	_, err := nginxPath()
	return err == nil
}
