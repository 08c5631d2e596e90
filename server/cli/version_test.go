package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// The ldflags path is proven on the real release binary by
// packaging/package_test.go; in-process only the fallback is visible.
func TestVersionCommand(t *testing.T) {
	out, err := run(t, "", "version")
	if err != nil || !strings.HasPrefix(out, "anvil ") || !strings.Contains(out, " commit ") || !strings.Contains(out, " built ") {
		t.Errorf("anvil version = %q, %v", out, err)
	}
	out, err = run(t, "", "version", "--json")
	var v struct{ Version, Commit, Date string }
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Version == "" || v.Commit == "" || v.Date == "" {
		t.Errorf("anvil version --json = %q, %v", out, err)
	}
}
