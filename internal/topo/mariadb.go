package topo

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver of the DSNs handed out
)

// MariaDBOptions shape one MariaDB server. The zero value is a fresh,
// empty server on a free port in a new temporary directory.
type MariaDBOptions struct {
	Host string // loopback address to bind; "" 127.0.0.1
	Port int    // 0: a free port
	Dir  string // working directory; "" a new temporary one, removed by Close
	// Args are more mariadbd options, e.g. "--read-only=ON".
	Args []string
}

// MariaDB is one mariadbd process on 127.0.0.1 with a datadir of its own,
// for the faults the shared database of the tests must never suffer:
// killed, restarted, turned read-only. Its root user has no password; the
// shop should connect as a user without SUPER (see CreateUser), as in
// production, so that read_only applies to it.
type MariaDB struct {
	Host    string
	Port    int
	Dir     string
	LogPath string
	ownDir  bool
	args    []string
	uid     uint32 // the user the server runs as; 0: ours
	gid     uint32

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartMariaDB initialises a datadir (mariadb-install-db) and starts
// mariadbd on it, waiting until root can connect. As root, the server runs
// as user mysql on a directory that user owns (mariadbd refuses to run as
// root).
func StartMariaDB(ctx context.Context, o MariaDBOptions) (_ *MariaDB, err error) {
	m := &MariaDB{Host: cmp.Or(o.Host, "127.0.0.1"), Port: o.Port, Dir: o.Dir}
	if m.Dir == "" {
		if m.Dir, err = os.MkdirTemp("", "topo-mariadb-"); err != nil {
			return nil, err
		}
		m.ownDir = true
	}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if m.Port == 0 {
		p, err := FreePorts(1)
		if err != nil {
			return nil, err
		}
		m.Port = p[0]
	}
	data := filepath.Join(m.Dir, "data")
	// A tmpdir of its own: mariadbd removes every #sql* file in its tmpdir
	// when it starts, so servers sharing /tmp (another test's, or the
	// next node's) would delete the temporary tables of a bootstrap still
	// running ("Unknown table 'mysql.tmp_user_sys'").
	tmp := filepath.Join(m.Dir, "tmp")
	for _, d := range []string{data, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	runAs, err := serverUser(m.Dir)
	if err != nil {
		return nil, err
	}
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		return nil, fmt.Errorf("topo: mariadb-install-db not on PATH (Debian: apt-get install mariadb-server): %w", err)
	}
	initArgs := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if runAs != "" {
		initArgs = append(initArgs, "--user="+runAs)
	}
	if out, err := exec.CommandContext(ctx, install, initArgs...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("topo: mariadb-install-db: %w\n%s", err, out)
	}
	m.LogPath = filepath.Join(m.Dir, "mariadbd.err")
	m.args = append([]string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--port=" + strconv.Itoa(m.Port),
		"--bind-address=" + m.Host, "--socket=" + filepath.Join(m.Dir, "mariadbd.sock"),
		"--pid-file=" + filepath.Join(m.Dir, "mariadbd.pid"), "--log-error=" + m.LogPath,
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--max-connections=500"}, o.Args...)
	if runAs != "" {
		// Started as that user rather than with --user: a server that
		// drops root itself loses its parent-death signal, and would
		// outlive a killed test or harness.
		u, err := user.Lookup(runAs)
		if err != nil {
			return nil, err
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		m.uid, m.gid = uint32(uid), uint32(gid)
	}
	return m, m.Start(ctx)
}

// serverUser is the user mariadbd must run as: mysql when we are root (and
// dir is handed to it), else ourselves ("").
func serverUser(dir string) (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return "", fmt.Errorf("topo: running as root, mariadbd needs the user mysql: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	err = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	return "mysql", err
}

// Addr is host:port.
func (m *MariaDB) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// DSN is a go-sql-driver DSN for user (no password) and database db.
func (m *MariaDB) DSN(user, db string) string {
	return fmt.Sprintf("%s@tcp(%s)/%s", user, m.Addr(), db)
}

// Root is a connection pool as root (the caller closes it).
func (m *MariaDB) Root() (*sql.DB, error) {
	return sql.Open("mysql", m.DSN("root", "")+"?timeout=2s&readTimeout=5s&writeTimeout=5s")
}

// CreateUser creates database db and a user with every privilege on it and
// none beyond (no SUPER, no READ ONLY ADMIN): what a service account has.
// A db with a wildcard (`loadtest\_%`) is a pattern: the user may create
// and use the databases it matches, and none is created.
func (m *MariaDB) CreateUser(ctx context.Context, user, db string) error {
	var stmts []string
	if !strings.Contains(db, "%") {
		stmts = append(stmts, "CREATE DATABASE IF NOT EXISTS `"+db+"`")
	}
	return m.exec(ctx, append(stmts,
		"CREATE USER IF NOT EXISTS '"+user+"'@'%'",
		"CREATE USER IF NOT EXISTS '"+user+"'@'localhost'",
		"GRANT ALL ON `"+db+"`.* TO '"+user+"'@'%'",
		"GRANT ALL ON `"+db+"`.* TO '"+user+"'@'localhost'")...)
}

// GTIDSeq is the sequence number of the last transaction in the server's
// binlog (@@gtid_binlog_pos): on a primary, the last it committed; on a
// replica with log-slave-updates, the last it applied.
func (m *MariaDB) GTIDSeq(ctx context.Context) (int64, error) {
	pos, err := m.queryString(ctx, "SELECT @@gtid_binlog_pos")
	return gtidSeq(pos), err
}

// SetReadOnly turns the server read-only (or back): what a demoted primary,
// or a proxy still pointing at a replica during a failover, looks like to a
// client without SUPER.
func (m *MariaDB) SetReadOnly(ctx context.Context, on bool) error {
	v := "OFF"
	if on {
		v = "ON"
	}
	return m.exec(ctx, "SET GLOBAL read_only = "+v)
}

func (m *MariaDB) exec(ctx context.Context, stmts ...string) error {
	db, err := m.Root()
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("topo: mariadb %d: %s: %w", m.Port, s, err)
		}
	}
	return nil
}

// Running reports whether the process is alive.
func (m *MariaDB) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Start starts mariadbd (again, after Kill: same port, same data) and waits
// up to 30 s for root to connect.
func (m *MariaDB) Start(ctx context.Context) error {
	path, err := exec.LookPath("mariadbd")
	if err != nil {
		if path, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			return fmt.Errorf("topo: mariadbd not found (Debian: apt-get install mariadb-server): %w", err)
		}
	}
	cmd := exec.Command(path, m.args...)
	cmd.Dir = m.Dir
	cmd.SysProcAttr = ownGroup(userAttr(m.uid, m.gid))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("topo: start mariadbd on %d: %w", m.Port, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.mu.Lock()
	m.cmd, m.exited = cmd, exited
	m.mu.Unlock()
	return poll(ctx, 30*time.Second, fmt.Sprintf("mariadbd on %d answering", m.Port), func(ctx context.Context) error {
		select {
		case <-exited:
			return fmt.Errorf("exited at start; log %s:\n%s", m.LogPath, tail(m.LogPath))
		default:
		}
		db, err := m.Root()
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	})
}

// Kill sends SIGKILL (no shutdown: what a crash of the database host looks
// like) to the server and the helpers it started (a state transfer under
// way), and waits for the server to be gone.
func (m *MariaDB) Kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	if err := killGroup(cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	<-exited
}

// Close kills the server and removes the directory it made.
func (m *MariaDB) Close() {
	m.Kill()
	if m.ownDir {
		_ = os.RemoveAll(m.Dir)
	}
}
