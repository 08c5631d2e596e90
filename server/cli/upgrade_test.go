package cli_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// The fixture's secrets (see server/store/testdata/release-5b855fe/make.sh).
const (
	fixtureDir      = "../store/testdata/release-5b855fe"
	fixturePassword = "fixture-password-1"
	fixtureToken    = "anvil_DRsQ-tr7ohLyTB_UGz_IPXrkh931v1osDyunMU20xqc"
)

// TestUpgradeFromRelease is the operator's upgrade from the last release
// before versioning, on each backend: db check names the pending
// migration, serve --auto-migrate=false refuses to start, db upgrade says
// what it applied (and again, nothing), and the upgraded database serves
// the release's users, token, nodes, ports, runbooks and history.
func TestUpgradeFromRelease(t *testing.T) {
	for _, backend := range storetest.Backends {
		t.Run(backend, func(t *testing.T) {
			setting := storetest.EmptySetting(t, backend)
			storetest.LoadRelease(t, setting, fixtureDir)

			latest := len(store.Migrations)
			_, err := run(t, "", "db", "check", "--database", setting)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("database schema version 0 needs %d migration(s) (1 baseline", latest)) {
				t.Errorf("db check before the upgrade: %v, want the pending migration named", err)
			}
			_, err = run(t, "", "serve", "--auto-migrate=false", "--listen", "127.0.0.1:0", "--database", setting)
			if err == nil || !strings.Contains(err.Error(), "run anvil db upgrade") {
				t.Errorf("serve --auto-migrate=false before the upgrade: %v, want a refusal pointing at db upgrade", err)
			}
			out, err := run(t, "", "db", "upgrade", "--database", setting)
			if err != nil || !strings.Contains(out, "applied migration 1: baseline") || !strings.Contains(out, fmt.Sprintf("upgraded from schema version 0 to %d", latest)) {
				t.Fatalf("db upgrade: %q %v", out, err)
			}
			out, err = run(t, "", "migrate", "--database", setting)
			if err != nil || !strings.Contains(out, fmt.Sprintf("at schema version %d: up to date, nothing to do", latest)) {
				t.Errorf("migrate after the upgrade: %q %v", out, err)
			}
			if out, err := run(t, "", "db", "check", "--database", setting); err != nil || !strings.Contains(out, fmt.Sprintf("schema version %d, current", latest)) {
				t.Errorf("db check after the upgrade: %q %v", out, err)
			}

			url, stop := serveInProcess(t, setting, "--auto-migrate=false")
			defer stop()
			tok := &servertest.Client{Base: url, Version: "latest", Header: http.Header{"X-Auth-Token": {fixtureToken}}}
			pw := &servertest.Client{Base: url, Version: "latest", Header: http.Header{
				"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("ops:"+fixturePassword))}}}
			for _, c := range []*servertest.Client{tok, pw} {
				if r := c.Do(t, "GET", "/v1/nodes/fx-node-1", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"rack":"r1"`) {
					t.Errorf("fx-node-1: %d %s", r.Status, r.Body)
				}
			}
			if r := tok.Do(t, "GET", "/v1/ports?node=fx-node-1", nil); len(r.JSON(t)["ports"].([]any)) != 2 {
				t.Errorf("fx-node-1's ports: %s", r.Body)
			}
			if r := tok.Do(t, "GET", "/v1/runbooks/CUSTOM_FX_REBOOT", nil); r.Status != 200 || !strings.Contains(string(r.Body), "Reboots the node.") {
				t.Errorf("runbook: %d %s", r.Status, r.Body)
			}
			if r := tok.Do(t, "GET", "/v1/nodes/demo-00001/history", nil); len(r.JSON(t)["history"].([]any)) == 0 {
				t.Errorf("demo-00001 lost its history: %s", r.Body)
			}
			if r := tok.Do(t, "GET", "/v1/allocations/fx-alloc-2", nil); r.Status != 200 || r.JSON(t)["state"] != "active" {
				t.Errorf("allocation: %d %s", r.Status, r.Body)
			}
			if r := tok.Do(t, "GET", "/v1/campaigns", nil); !strings.Contains(string(r.Body), "fx-campaign") {
				t.Errorf("campaigns: %d %s", r.Status, r.Body)
			}
			if r := tok.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "name": "after-upgrade"}); r.Status != 201 {
				t.Errorf("create a node after the upgrade: %d %s", r.Status, r.Body)
			}
		})
	}
}

// TestNewerDatabaseRefused: every command refuses a database a newer
// anvil upgraded, naming both versions, serve whether or not it may
// migrate.
func TestNewerDatabaseRefused(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anvil.db")
	if _, err := run(t, "", "db", "upgrade", "--database", db); err != nil {
		t.Fatal(err)
	}
	markNewer(t, db)
	want := newerMessage()
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0"},
		{"serve", "--listen", "127.0.0.1:0", "--auto-migrate=false"},
		{"db", "upgrade"},
		{"migrate"},
		{"db", "check"},
	} {
		if _, err := run(t, "", append(args, "--database", db)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("anvil %s: %v, want %q", strings.Join(args, " "), err, want)
		}
	}
}

// markNewer records a step this binary does not know, as a newer anvil's
// upgrade would.
func markNewer(t *testing.T, setting string) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, setting)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Apply(ctx, append(store.Migrations[:len(store.Migrations):len(store.Migrations)], store.Step{
		Name: "expand: a column and a table this anvil does not know",
		Up: func(ctx context.Context, m *store.Migration) error {
			return m.Exec(ctx, "ALTER TABLE nodes ADD COLUMN rack_unit INTEGER", "CREATE TABLE racks (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
}

// TestRollingUpgradeOnPostgres: during a rolling upgrade a replica of the
// previous anvil meets a database the new one has upgraded. While it runs
// it keeps serving (the step only added: its queries name their columns);
// restarted, it refuses to start, saying the database is newer, rather
// than serve a schema it does not know.
func TestRollingUpgradeOnPostgres(t *testing.T) {
	setting := storetest.PostgresSchema(t)
	if _, err := run(t, "", "db", "upgrade", "--database", setting); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "ops-password-1\n", "user", "create", "ops", "--password-stdin", "--database", setting); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "", "user", "grant", "ops", "--system", "--role", "admin", "--database", setting); err != nil {
		t.Fatal(err)
	}
	url, stop := serveInProcess(t, setting)
	defer stop()
	c := &servertest.Client{Base: url, Version: "latest", Header: http.Header{
		"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("ops:ops-password-1"))}}}
	if r := c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "name": "before"}); r.Status != 201 {
		t.Fatalf("create before the upgrade: %d %s", r.Status, r.Body)
	}

	markNewer(t, setting) // the new anvil's upgrade

	if r := c.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "fake-hardware", "name": "during"}); r.Status != 201 {
		t.Errorf("the running old replica creating a node after the upgrade: %d %s", r.Status, r.Body)
	}
	if r := c.Do(t, "PATCH", "/v1/nodes/before", []map[string]any{{"op": "add", "path": "/extra/rack", "value": "r1"}}); r.Status != 200 {
		t.Errorf("the running old replica updating a node after the upgrade: %d %s", r.Status, r.Body)
	}
	if r := c.Do(t, "GET", "/v1/nodes/detail", nil); len(r.JSON(t)["nodes"].([]any)) != 2 {
		t.Errorf("the running old replica listing nodes after the upgrade: %d %s", r.Status, r.Body)
	}
	_, err := run(t, "", "serve", "--listen", "127.0.0.1:0", "--database", setting)
	if err == nil || !strings.Contains(err.Error(), newerMessage()) {
		t.Errorf("an old replica restarting after the upgrade: %v, want a refusal naming the versions", err)
	}
}

// newerMessage is the refusal of a database markNewer marked, one step
// ahead of this anvil.
func newerMessage() string {
	n := len(store.Migrations)
	return fmt.Sprintf("database schema version %d is newer than this anvil's %d", n+1, n)
}
