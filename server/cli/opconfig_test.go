package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/cli"
)

// TestOperatorCommandsFindServesDatabase: the operator commands read the
// config file serve reads (the packaged /etc/anvil/anvil.yaml when none
// is named, its serve-only keys skipped) and ANVIL_*; and they never
// create a database: without one, user list fails, says where it looked
// and how to create one, and leaves no file behind. db init creates it.
func TestOperatorCommandsFindServesDatabase(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(t.TempDir())
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "var")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(state, "anvil.db")
	cfg := filepath.Join(dir, "anvil.yaml")
	defer cli.SetDefaultConfig(cfg)()

	// No config file at all: the default ./anvil.db is looked for, not made.
	_, err = run(t, "", "user", "list")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(cwd, "anvil.db")) || !strings.Contains(err.Error(), "anvil db init") {
		t.Errorf("user list without a database: %v, want an error naming %s and anvil db init", err, filepath.Join(cwd, "anvil.db"))
	}
	if _, err := os.Stat(filepath.Join(cwd, "anvil.db")); !os.IsNotExist(err) {
		t.Errorf("user list left ./anvil.db behind: %v", err)
	}

	// The packaged config names the database (and serve's listen address,
	// which user list has no flag for).
	if err := os.WriteFile(cfg, []byte("database: "+db+"\nlisten: 127.0.0.1:6385\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "", "user", "create", "ann")
	if err == nil || !strings.Contains(err.Error(), db) || !strings.Contains(err.Error(), cfg) {
		t.Errorf("user create before db init: %v, want an error naming %s and %s", err, db, cfg)
	}
	for _, f := range []string{db, filepath.Join(cwd, "anvil.db")} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("user create left %s behind: %v", f, err)
		}
	}
	if out, err := run(t, "", "db", "init"); err != nil || !strings.Contains(out, "created") {
		t.Fatalf("db init: %q %v", out, err)
	}
	if _, err := run(t, "", "user", "create", "ann"); err != nil {
		t.Fatalf("user create after db init: %v", err)
	}
	if out, err := run(t, "", "user", "list", "--database", db); err != nil || !strings.Contains(out, "ann") {
		t.Errorf("user list of %s: %q %v, want ann, created through the config file", db, out, err)
	}

	// ANVIL_DATABASE wins over the file, and is refused the same way.
	other := filepath.Join(state, "other.db")
	t.Setenv("ANVIL_DATABASE", other)
	if _, err := run(t, "", "user", "list"); err == nil || !strings.Contains(err.Error(), other) {
		t.Errorf("user list with ANVIL_DATABASE=%s: %v", other, err)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("user list created %s: %v", other, err)
	}
}
