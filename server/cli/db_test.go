package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/syncbuf"
	"github.com/anvilproject/anvil/internal/testport"
	"github.com/anvilproject/anvil/server/cli"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// serveInProcess runs `anvil serve` on db, with any further flags, until
// the returned stop is called, as an operator would run it, and returns
// its URL.
func serveInProcess(t *testing.T, db string, flags ...string) (url string, stop func()) {
	t.Helper()
	url, _, stop = serveLogged(t, db, append([]string{"--log-level", "warn"}, flags...)...)
	return url, stop
}

// serveLogged is serveInProcess that also returns what serve logs (at
// info level unless flags say otherwise).
func serveLogged(t *testing.T, db string, flags ...string) (url string, logs *syncbuf.Buffer, stop func()) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	logs, stop = startServe(t, db, append([]string{"--listen", addr}, flags...)...)
	url = "http://" + addr
	for range 200 {
		if r, err := http.Get(url + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return url, logs, stop
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	t.Fatalf("serve did not become ready:\n%s", logs.String())
	return "", nil, nil
}

// startServe starts `anvil serve` on db with flags (--listen among
// them) and info-level logs, without waiting for it to answer; stop
// ends it and reports how it ended.
func startServe(t *testing.T, db string, flags ...string) (logs *syncbuf.Buffer, stop func()) {
	t.Helper()
	logs = &syncbuf.Buffer{}
	root := cli.NewRoot(logs, logs)
	root.SetArgs(append([]string{"serve", "--database", db, "--log-level", "info"}, flags...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	return logs, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v\n%s", err, logs.String())
			}
		case <-time.After(40 * time.Second):
			t.Fatal("serve did not stop")
		}
	}
}

// TestMigrationsLogged: serve on a new database says it migrates, from
// which version to which, and names every step it applied; on a current
// database it says nothing of migrations.
func TestMigrationsLogged(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anvil.db")
	_, logs, stop := serveLogged(t, db)
	stop()
	out := logs.String()
	steps := regexp.MustCompile(`msg="schema migration applied" version=(\d+) name=`).FindAllStringSubmatch(out, -1)
	if len(steps) == 0 || !strings.Contains(out, `msg="migrating the database schema" from_version=0 to_version=`+steps[len(steps)-1][1]) {
		t.Fatalf("no migration logged on a new database:\n%s", out)
	}
	for i, s := range steps {
		if s[1] != fmt.Sprint(i+1) {
			t.Fatalf("step %d logged as version %s:\n%s", i+1, s[1], out)
		}
	}
	if !strings.Contains(out, `msg="database schema migrated" version=`+steps[len(steps)-1][1]) {
		t.Errorf("no summary line:\n%s", out)
	}
	_, logs, stop = serveLogged(t, db)
	stop()
	if strings.Contains(logs.String(), "migrat") {
		t.Errorf("a current database logged a migration:\n%s", logs.String())
	}
}

// TestBackupAndRestore is the documented procedure end to end: back up a
// SQLite database while anvil serves and writes to it, stop, copy the
// backup into place, start, and find every record of the backup and none
// written after it.
func TestBackupAndRestore(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	backup := filepath.Join(dir, "backup", "anvil-backup.db")
	if err := os.Mkdir(filepath.Dir(backup), 0o755); err != nil {
		t.Fatal(err)
	}
	must := func(stdin string, args ...string) string {
		t.Helper()
		out, err := run(t, stdin, args...)
		if err != nil {
			t.Fatalf("anvil %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	const pw = "restore-test-password"
	must("", "db", "init", "--database", db)
	must(pw+"\n", "user", "create", "ops", "--password-stdin", "--database", db)
	must("", "user", "grant", "ops", "--system", "--role", "admin", "--database", db)
	must("", "user", "create", "carol", "--database", db)
	must("", "user", "grant", "carol", "--project", "p1", "--role", "member", "--database", db)

	url, stop := serveInProcess(t, db)
	c := &servertest.Client{Base: url, Version: "latest", Header: http.Header{
		"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("ops:"+pw))}}}
	create := func(name string) {
		t.Helper()
		if r := c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake", "name": name, "owner": "p1"}); r.Status != 201 {
			t.Fatalf("create node %s: %d %s", name, r.Status, r.Body)
		}
	}
	const before = 40
	for i := range before {
		create(fmt.Sprintf("kept-%02d", i))
	}
	if r := c.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_KEPT",
		"steps": []map[string]any{{"interface": "power", "step": "reboot", "order": 1}}}); r.Status != 201 {
		t.Fatalf("create runbook: %d %s", r.Status, r.Body)
	}

	// The server keeps writing while the backup runs: the backup must
	// neither fail on a busy database nor block the writers.
	var wg sync.WaitGroup
	writing := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-writing:
				return
			default:
			}
			r := c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake", "name": fmt.Sprintf("during-%03d", i)})
			if r.Status != 201 {
				t.Errorf("create during backup: %d %s", r.Status, r.Body)
				return
			}
		}
	})
	time.Sleep(100 * time.Millisecond)
	out := must("", "db", "backup", backup, "--database", db)
	close(writing)
	wg.Wait()
	if !strings.Contains(out, "backed up") {
		t.Errorf("db backup printed %q", out)
	}
	// It holds BMC passwords and the portal's session keys: the owner's
	// alone, whatever the umask.
	if fi, err := os.Stat(backup); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := run(t, "", "db", "backup", backup, "--database", db); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second backup onto the same file: %v, want a refusal naming the existing file", err)
	}
	if out := must("", "db", "check", "--database", backup); !strings.Contains(out, "ok") {
		t.Errorf("db check of the backup printed %q", out)
	}
	create("after-backup")
	stop()

	// Restore: with anvil stopped, copy the backup into place and remove
	// the old database's WAL files, which belong to the old file.
	raw, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(db + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}

	if out := must("", "db", "check", "--database", db); !strings.Contains(out, "ok") {
		t.Errorf("db check of the restored database printed %q", out)
	}
	url, stop = serveInProcess(t, db)
	defer stop()
	c.Base = url
	for i := range before {
		if r := c.Do(t, "GET", fmt.Sprintf("/v1/nodes/kept-%02d", i), nil); r.Status != 200 {
			t.Errorf("node kept-%02d after restore: %d", i, r.Status)
		}
	}
	if r := c.Do(t, "GET", "/v1/nodes/after-backup", nil); r.Status != 404 {
		t.Errorf("node created after the backup: %d after restore, want 404 (the restore did not replace the database)", r.Status)
	}
	if r := c.Do(t, "GET", "/v1/runbooks/CUSTOM_KEPT", nil); r.Status != 200 {
		t.Errorf("runbook after restore: %d %s", r.Status, r.Body)
	}
	list := must("", "user", "list", "--database", db)
	for _, want := range []string{"ops", "carol", "member@project p1"} {
		if !strings.Contains(list, want) {
			t.Errorf("user list after restore lacks %q:\n%s", want, list)
		}
	}
}

// TestDBCheckFindsCorruption damages a page of a SQLite database and
// expects db check to fail and say what it found.
func TestDBCheckFindsCorruption(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	var csv strings.Builder
	csv.WriteString("name,driver,owner\n")
	for i := range 2000 {
		fmt.Fprintf(&csv, "node-%04d,fake,p%d\n", i, i%7)
	}
	file := filepath.Join(dir, "fleet.csv")
	if err := os.WriteFile(file, []byte(csv.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "", "db", "init", "--database", db); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "", "node", "import", file, "--database", db); err != nil {
		t.Fatal(err)
	}
	// A consistent single file, without the WAL, to damage.
	clean := filepath.Join(dir, "clean.db")
	if _, err := run(t, "", "db", "backup", clean, "--database", db); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 16*4096 {
		t.Fatalf("database only %d bytes; expected several pages", len(raw))
	}
	// Scribble over the middle of every page after the first (the header
	// stays intact so the file still opens as a database).
	for off := 4096 + 100; off+200 < len(raw); off += 4096 {
		copy(raw[off:off+200], bytes.Repeat([]byte{0xA5}, 200))
	}
	bad := filepath.Join(dir, "bad.db")
	if err := os.WriteFile(bad, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "", "db", "check", "--database", bad)
	if err == nil {
		t.Fatal("db check passed a corrupted database")
	}
	if msg := err.Error(); !strings.Contains(msg, "integrity") && !strings.Contains(msg, "malformed") {
		t.Errorf("db check error does not say what is wrong: %v", err)
	}
	if _, err := run(t, "", "db", "check", "--database", filepath.Join(dir, "missing.db")); err == nil {
		t.Error("db check of a file that does not exist passed (and may have created it)")
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !os.IsNotExist(err) {
		t.Error("db check created the missing database file")
	}
}

// TestDBOnPostgres: db check passes a migrated schema and names what an
// empty one lacks; db backup points at pg_dump.
func TestDBOnPostgres(t *testing.T) {
	setting := storetest.PostgresSchema(t)
	_, err := run(t, "", "db", "check", "--database", setting)
	if err == nil || !strings.Contains(err.Error(), "table nodes is missing; run anvil db upgrade") {
		t.Errorf("db check of an empty schema: %v, want the missing tables named", err)
	}
	if _, err := run(t, "", "migrate", "--database", setting); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "", "db", "check", "--database", setting); err != nil || !strings.Contains(out, "ok (postgres") {
		t.Errorf("db check of a migrated schema: %q %v", out, err)
	}
	_, err = run(t, "", "db", "backup", filepath.Join(t.TempDir(), "x"), "--database", setting)
	if err == nil || !strings.Contains(err.Error(), "pg_dump") {
		t.Errorf("db backup on PostgreSQL: %v, want a pointer to pg_dump", err)
	}
}

// TestServeSettingsRefused: bad pool, access-log, service-project, conductor-group, deploy-images and webhook settings stop serve
// before it listens, naming the setting, from flags, the environment or
// the config file alike.
func TestServeSettingsRefused(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	cfg := filepath.Join(dir, "anvil.yaml")
	if err := os.WriteFile(cfg, []byte("db_max_open: 4\ndb_max_idle: 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	images, list := filepath.Join(dir, "images.json"), filepath.Join(dir, "list.json")
	if err := os.WriteFile(images, []byte(`[{"name": "Debian 13", "url": "https://images.example/debian.raw", "checksum": "sha256:zz"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(list, []byte(`{"name": "Debian 13"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  [2]string
		args []string
		want string
	}{
		{args: []string{"--access-log", "sometimes"}, want: "--access-log"},
		{args: []string{"--db-max-open", "10", "--db-max-idle", "40"}, want: "--db-max-idle 40: more than --db-max-open 10"},
		{env: [2]string{"ANVIL_DB_MAX_OPEN", "-2"}, want: "--db-max-open -2"},
		{args: []string{"--config", cfg}, want: "--db-max-idle 9: more than --db-max-open 4"},
		{env: [2]string{"ANVIL_SERVICE_PROJECT", " service"}, want: `--service-project " service"`},
		{args: []string{"--service-project", ""}, want: `--service-project ""`},
		{args: []string{"--conductor-group", "rack 1"}, want: `--conductor-group: Invalid conductor group "rack 1"`},
		{args: []string{"--gc-percent", "0"}, want: "--gc-percent 0: must be more than 0"},
		{args: []string{"--password-hash-cost", "3"}, want: "--password-hash-cost: bcrypt cost 3: give 4 to 31"},
		{args: []string{"--deploy-images", filepath.Join(dir, "none.json")}, want: "--deploy-images: open " + filepath.Join(dir, "none.json")},
		{args: []string{"--deploy-images", images}, want: "--deploy-images: " + images + `: image "Debian 13": checksum must be`},
		{args: []string{"--deploy-images", list}, want: "--deploy-images: " + list + ": not a JSON list"},
		{args: []string{"--webhook-url", "https://hooks.example.com/anvil"}, want: "--webhook-secret is required with --webhook-url"},
		{env: [2]string{"ANVIL_WEBHOOK_SECRET", "s3cret"}, want: "--webhook-secret is set but --webhook-url is not"},
		{args: []string{"--webhook-url", "hooks.example.com", "--webhook-secret", "s3cret"}, want: "--webhook-url: give an http:// or https:// URL"},
		{args: []string{"--bootloader", "/srv/esp.img"}, want: `--bootloader "/srv/esp.img": give an http:// or https:// URL`},
		{env: [2]string{"ANVIL_DEPLOY_KERNEL", "http://images.example/ipa.kernel"}, want: "--deploy-kernel and --deploy-ramdisk: give both or neither"},
		{args: []string{"--rescue-ramdisk", "http://images.example/rescue.initramfs"}, want: "--rescue-kernel and --rescue-ramdisk: give both or neither"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			_, err := run(t, "", append([]string{"serve", "--listen", "127.0.0.1:0", "--database", db}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("serve %v %v: %v, want an error containing %q", tc.env, tc.args, err, tc.want)
			}
		})
	}
}
