package cli_test

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/cli"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// run executes the anvil command in-process.
func run(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := cli.NewRoot(&out, &errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestUserAndTokenCommands(t *testing.T) {
	db := filepath.Join(t.TempDir(), "anvil.db")
	must := func(stdin string, args ...string) string {
		t.Helper()
		out, err := run(t, stdin, append(args, "--database", db)...)
		if err != nil {
			t.Fatalf("anvil %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	fails := func(want string, args ...string) {
		t.Helper()
		_, err := run(t, "", append(args, "--database", db)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("anvil %s: err %v, want one containing %q", strings.Join(args, " "), err, want)
		}
	}

	must("", "db", "init")
	pw := strings.TrimSpace(must("", "user", "create", "carol"))
	if len(pw) != 20 {
		t.Errorf("generated password %q", pw)
	}
	must("correct horse battery\n", "user", "create", "dave", "--password-stdin")
	fails("at least 12", "user", "create", "erin", "--password-stdin")
	fails("already exists", "user", "create", "carol")
	fails("user name", "user", "create", "bad name")

	must("", "user", "grant", "carol", "--project", "p1", "--role", "member")
	must("", "user", "grant", "carol", "--system", "--role", "reader")
	// Ironic's service role, in a project and on the system; it implies
	// no reader role, so a service token cannot carry one.
	must("", "user", "create", "nova")
	must("", "user", "grant", "nova", "--project", "p1", "--role", "service")
	must("", "user", "grant", "nova", "--system", "--role", "service")
	if tok := strings.TrimSpace(must("", "token", "create", "--user", "nova", "--system", "--roles", "service")); !strings.HasPrefix(tok, "anvil_") {
		t.Errorf("service token create printed %q", tok)
	}
	fails("does not hold role reader", "token", "create", "--user", "nova", "--project", "p1", "--roles", "reader")
	fails("not one of", "user", "grant", "carol", "--project", "p1", "--role", "owner")
	fails("[project system] is required", "user", "grant", "carol", "--role", "member")
	fails("[project system] were all set", "user", "grant", "carol", "--project", "p1", "--system", "--role", "member")

	list := must("", "user", "list")
	for _, want := range []string{"carol", "member@project p1", "reader@system", "dave", "service@project p1", "service@system"} {
		if !strings.Contains(list, want) {
			t.Errorf("user list lacks %q:\n%s", want, list)
		}
	}

	tok := strings.TrimSpace(must("", "token", "create", "--user", "carol", "--project", "p1", "--roles", "member", "--expires", "24h"))
	if !strings.HasPrefix(tok, "anvil_") {
		t.Errorf("token create printed %q", tok)
	}
	fails("does not hold role admin", "token", "create", "--user", "carol", "--project", "p1", "--roles", "admin")
	fails("does not hold role reader", "token", "create", "--user", "carol", "--project", "p2", "--roles", "reader")
	tokens := must("", "token", "list", "--user", "carol")
	if !strings.Contains(tokens, "project p1") || strings.Contains(tokens, tok) {
		t.Errorf("token list shows %q", tokens)
	}
	id := strings.Fields(strings.Split(tokens, "\n")[1])[0]
	must("", "token", "revoke", id)
	if !strings.Contains(must("", "token", "list"), "revoked") {
		t.Error("revoked token not shown as revoked")
	}
	fails("already revoked", "token", "revoke", id)

	must("", "user", "revoke", "carol", "--project", "p1", "--role", "member")
	fails("does not hold role", "user", "revoke", "carol", "--project", "p1", "--role", "member")
	must("", "user", "delete", "carol")
	fails("does not exist", "user", "delete", "carol")
	if strings.Contains(must("", "user", "list"), "carol") {
		t.Error("deleted user still listed")
	}
}

func writeZip(t *testing.T, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := zip.NewWriter(f)
	for n, b := range files {
		e, _ := w.Create(n)
		e.Write([]byte(b))
	}
	w.Close()
	f.Close()
}

func TestPolicyCommands(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "anvil.db")
	good, bad := filepath.Join(dir, "good.zip"), filepath.Join(dir, "bad.zip")
	writeZip(t, good, map[string]string{"etc/10-a.yaml": `"baremetal:node:set_power_state": "rule:system_member"`, "README.txt": "docs"})
	writeZip(t, bad, map[string]string{"20-b.yaml": `"anvil:user:manage": "@"`})
	if _, err := run(t, "", "db", "init", "--database", db); err != nil {
		t.Fatal(err)
	}

	if out, err := run(t, "", "policy", "validate", good); err != nil || !strings.Contains(out, "valid: 1 file(s)") || strings.Contains(out, "WIDENS") {
		t.Errorf("validate good: %q %v", out, err)
	}
	wide := filepath.Join(dir, "wide.zip")
	writeZip(t, wide, map[string]string{"10-w.yaml": `"baremetal:node:update:owner": "@"`})
	if out, err := run(t, "", "policy", "validate", wide); err != nil || !strings.Contains(out, "baremetal:node:update:owner") || !strings.Contains(out, "WIDENS access for system-reader") {
		t.Errorf("validate a widening: %q %v", out, err)
	}
	base := filepath.Join(dir, "base.zip")
	writeZip(t, base, map[string]string{"10-b.yaml": `"system_member": "@"`})
	if _, err := run(t, "", "policy", "validate", base); err == nil || !strings.Contains(err.Error(), `"system_member" is a base rule`) {
		t.Errorf("validate a base-rule override: %v", err)
	}
	if _, err := run(t, "", "policy", "validate", bad); err == nil || !strings.Contains(err.Error(), "protected") {
		t.Errorf("validate bad: %v", err)
	}
	if out, err := run(t, "", "policy", "apply", good, "--database", db); err != nil || !strings.Contains(out, "revision 1") {
		t.Fatalf("apply good: %q %v", out, err)
	}
	if out, _ := run(t, "", "policy", "status", "--database", db); !strings.HasPrefix(out, "PO: revision 1") {
		t.Errorf("status after apply: %q", out)
	}
	if _, err := run(t, "", "policy", "apply", bad, "--database", db); err == nil || !strings.Contains(err.Error(), "unchanged") {
		t.Errorf("apply bad: %v", err)
	}
	if out, _ := run(t, "", "policy", "status", "--database", db); !strings.HasPrefix(out, "PO (broken): ") || !strings.Contains(out, "protected") {
		t.Errorf("status after a refused upload: %q", out)
	}
}

// TestLastAdminCLI: anvil user revoke and delete refuse to take away the
// last active system admin, with a message saying so, on both databases;
// with a second admin, the first goes.
func TestLastAdminCLI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db string, _ *store.DB) {
		must := func(args ...string) {
			t.Helper()
			if _, err := run(t, "", append(args, "--database", db)...); err != nil {
				t.Fatalf("anvil %s: %v", strings.Join(args, " "), err)
			}
		}
		last := func(args ...string) {
			t.Helper()
			_, err := run(t, "", append(args, "--database", db)...)
			if err == nil || !strings.Contains(err.Error(), "root is the last active system admin") {
				t.Errorf("anvil %s: err %v, want the last active system admin refused", strings.Join(args, " "), err)
			}
		}
		must("user", "create", "root")
		must("user", "grant", "root", "--system", "--role", "admin")
		must("user", "grant", "root", "--system", "--role", "reader")
		last("user", "revoke", "root", "--system", "--role", "admin")
		last("user", "delete", "root")
		must("user", "create", "ann")
		must("user", "grant", "ann", "--system", "--role", "admin")
		must("user", "revoke", "root", "--system", "--role", "admin")
		must("user", "delete", "root")
	})
}
