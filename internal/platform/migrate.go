package platform

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	schema "github.com/seckill-lab/shop/sql"
)

// Migrate applies the versioned migrations of the database's dialect that
// have not run yet. It is safe to run from several processes at once: MySQL
// serialises them with a named lock (GET_LOCK), SQLite with an immediate
// transaction; each version is recorded once in schema_migrations.
func Migrate(ctx context.Context, db *DB, log *slog.Logger) (applied []int, err error) {
	files, err := migrationFiles(db.Dialect)
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()

	if db.Dialect == DialectMySQL {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('shop.migrate', 60)").Scan(&got); err != nil {
			return nil, fmt.Errorf("migrate: take lock: %w", err)
		}
		if got.Int64 != 1 {
			return nil, fmt.Errorf("migrate: another process held the migration lock for 60s")
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('shop.migrate')") //nolint:errcheck
		return applyAll(ctx, conn, files, db.Dialect, log, nil)
	}
	tx, err := conn.BeginTx(ctx, nil) // _txlock=immediate: the write lock is taken now
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck
	applied, err = applyAll(ctx, conn, files, db.Dialect, log, tx)
	if err != nil {
		return nil, err
	}
	return applied, tx.Commit()
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func applyAll(ctx context.Context, conn *sql.Conn, files []migrationFile, dialect string, log *slog.Logger, tx *sql.Tx) ([]int, error) {
	var ex execer = conn
	if tx != nil {
		ex = tx
	}
	ddl := "CREATE TABLE IF NOT EXISTS schema_migrations (version INT NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at DATETIME(6) NOT NULL)"
	if dialect == DialectSQLite {
		ddl = "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at DATETIME NOT NULL)"
	}
	if _, err := ex.ExecContext(ctx, ddl); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	done := map[int]bool{}
	rows, err := ex.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		done[v] = true
	}
	rows.Close()
	var applied []int
	for _, f := range files {
		if done[f.version] {
			continue
		}
		for _, stmt := range splitStatements(f.body) {
			if _, err := ex.ExecContext(ctx, stmt); err != nil {
				return applied, fmt.Errorf("migrate %s: %w\n%s", f.name, err, stmt)
			}
		}
		if _, err := ex.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", f.version, f.name, time.Now().UTC()); err != nil {
			return applied, fmt.Errorf("migrate %s: record: %w", f.name, err)
		}
		log.Info("migration applied", "version", f.version, "name", f.name)
		applied = append(applied, f.version)
	}
	return applied, nil
}

type migrationFile struct {
	version int
	name    string
	body    string
}

func migrationFiles(dialect string) ([]migrationFile, error) {
	entries, err := fs.ReadDir(schema.Migrations, dialect)
	if err != nil {
		return nil, err
	}
	var out []migrationFile
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration %s/%s: name must be NNNN_name.sql", dialect, name)
		}
		b, err := fs.ReadFile(schema.Migrations, path.Join(dialect, name))
		if err != nil {
			return nil, err
		}
		out = append(out, migrationFile{version: v, name: name, body: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// splitStatements cuts a migration at semicolons that end a line, dropping
// comment-only lines. Migrations hold no procedures, so this is enough.
func splitStatements(body string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(body, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
