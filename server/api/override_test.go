package api_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/override"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// eventually polls cond for up to 5 s (replicas poll every second).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 5 s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readyPolicy(t *testing.T, c *servertest.Client) string {
	r := c.Do(t, "GET", "/readyz", nil)
	s, _ := r.JSON(t)["policy"].(string)
	return s
}

// TestPolicyOverrideChangesDecisions: an upload that lets owner members
// clean with explicit steps takes effect on two PostgreSQL replicas; a
// broken upload leaves it in force and says why; a fix clears it.
func TestPolicyOverrideChangesDecisions(t *testing.T) {
	setting := storetest.Setting(t, "postgres")
	o := server.Options{PolicyOverrideEnabled: true, PolicyDir: filepath.Join(t.TempDir(), "a")}
	srvA, clients := startLocal(t, setting, o)
	o.Database, o.PolicyDir = setting, filepath.Join(t.TempDir(), "b")
	srvB := servertest.Start(t, o)
	admin, member := clients["system-admin"], clients["owner-member"]
	memberB := srvB.Client()
	memberB.Header = member.Header

	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "po-1", "driver": "fake", "owner": "own"})
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	waitState(t, admin, id, "manageable")
	clean := map[string]any{"target": "clean", "clean_steps": steps(step("power", "power_on", nil))}
	provision(t, member, id, clean, 403)

	ctx := context.Background()
	good := override.Files{"10-steps.yaml": []byte(`"baremetal:node:set_provision_state:clean_steps": "rule:system_member or rule:owner_member"`)}
	if _, err := override.Apply(ctx, srvA.DB, srvA.Audit, good, "test"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*servertest.Client{"A": member, "B": memberB} {
		eventually(t, "replica "+name+" enforcing the override", func() bool {
			r := c.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", clean)
			if r.Status == 202 {
				waitState(t, admin, id, "manageable")
				return true
			}
			return false
		})
	}
	if s := readyPolicy(t, admin); !strings.HasPrefix(s, "PO: ") || !strings.Contains(s, "10-steps.yaml") {
		t.Errorf("status after a good upload: %q", s)
	}
	data, err := os.ReadFile(filepath.Join(o.PolicyDir, "10-steps.yaml"))
	if err != nil || !strings.Contains(string(data), "owner_member") {
		t.Errorf("replica B's policy.d was not written: %v", err)
	}

	// A broken upload changes nothing but the status.
	bad := override.Files{"20-bad.yaml": []byte(`"baremetal:node:get": "role:admin and ("`)}
	if _, err := override.Apply(ctx, srvA.DB, srvA.Audit, bad, "test"); err == nil {
		t.Fatal("a broken upload was accepted")
	}
	eventually(t, "PO (broken) on replica B", func() bool {
		return strings.HasPrefix(readyPolicy(t, memberB), "PO (broken): ")
	})
	provision(t, member, id, clean, 202)
	waitState(t, admin, id, "manageable")

	// Fixing it clears the status; dropping the override restores the default.
	if _, err := override.Apply(ctx, srvA.DB, srvA.Audit, override.Files{}, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "defaults back on replica B", func() bool {
		return memberB.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", clean).Status == 403
	})
	// Replica A polls on its own clock, so its status may trail B's by a poll.
	eventually(t, "replica A's status clear after the fix", func() bool {
		return !strings.Contains(readyPolicy(t, admin), "broken")
	})
	evs := clients["system-reader"].Do(t, "GET", "/v1/events?rule=anvil:policy:update", nil).JSON(t)["events"].([]any)
	if len(evs) != 3 {
		t.Errorf("%d audited uploads, want 3", len(evs))
	}
}

// TestPolicyOverrideDisabled: with the switch off a broken directory is
// ignored and the defaults decide.
func TestPolicyOverrideDisabled(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("a: ["), 0o644); err != nil {
		t.Fatal(err)
	}
	_, clients := startLocal(t, storetest.Setting(t, "sqlite"), server.Options{PolicyDir: dir})
	if s := readyPolicy(t, clients["system-admin"]); s != "defaults (overrides disabled)" {
		t.Errorf("status %q", s)
	}
	mustStatus(t, clients["owner-reader"].Do(t, "GET", "/v1/nodes", nil), 200)
}

// TestPolicyDropIn: a file dropped into policy.d is applied; a broken one
// keeps the previous policy and says so.
func TestPolicyDropIn(t *testing.T) {
	dir := t.TempDir()
	_, clients := startLocal(t, storetest.Setting(t, "sqlite"), server.Options{PolicyDir: dir, PolicyOverrideEnabled: true})
	admin := clients["system-admin"]
	mustStatus(t, clients["system-reader"].Do(t, "GET", "/v1/conductors", nil), 200)
	if err := os.WriteFile(filepath.Join(dir, "10-conductors.yaml"), []byte(`"baremetal:conductor:get": "rule:system_admin"`), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the drop-in applied", func() bool {
		return clients["system-reader"].Do(t, "GET", "/v1/conductors", nil).Status == 403
	})
	if err := os.WriteFile(filepath.Join(dir, "20-broken.yaml"), []byte(`"baremetal:node:get": "rule:"`), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PO (broken) from the drop-in", func() bool {
		return strings.Contains(readyPolicy(t, admin), "PO (broken): ") && strings.Contains(readyPolicy(t, admin), "20-broken.yaml")
	})
	mustStatus(t, clients["system-reader"].Do(t, "GET", "/v1/conductors", nil), 403)
	mustStatus(t, admin.Do(t, "GET", "/v1/conductors", nil), 200)
}

// TestPolicyOverrideBrokenAtStartRefuses: with overrides on, a broken
// file in policy.d and no stored override to fall back on, the server
// refuses to start and names the file, instead of serving the wider
// defaults.
func TestPolicyOverrideBrokenAtStartRefuses(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		dir := t.TempDir()
		for name, body := range map[string]string{
			"10-narrow.yaml": `"baremetal:node:list": "rule:system_member"`,
			"20-broken.yaml": `"baremetal:node:get": "rule:"`,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		app, err := server.New(context.Background(), server.Options{Database: setting, PolicyDir: dir, PolicyOverrideEnabled: true,
			FirmwareDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			app.Close()
			t.Fatal("the server started with a broken policy.d and nothing to fall back on")
		}
		if !strings.Contains(err.Error(), "20-broken.yaml") || !strings.Contains(err.Error(), "refusing to start") {
			t.Fatalf("the error does not name the file: %v", err)
		}
	})
}

// TestPolicyOverrideBrokenAtStartKeepsLastGood: a server starting while
// the newest stored override no longer validates puts the last good one
// in force, so the rule it narrowed stays narrowed for an owner member,
// and says so in /readyz.
func TestPolicyOverrideBrokenAtStartKeepsLastGood(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		ctx := context.Background()
		o := server.Options{PolicyOverrideEnabled: true, PolicyDir: filepath.Join(t.TempDir(), "a")}
		srvA, clients := startLocal(t, setting, o)
		member := clients["owner-member"]
		mustStatus(t, member.Do(t, "GET", "/v1/nodes", nil), 200)
		narrow := override.Files{"10-narrow.yaml": []byte(`"baremetal:node:list": "rule:system_member"`)}
		if _, err := override.Apply(ctx, srvA.DB, srvA.Audit, narrow, "test"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the override applied", func() bool { return member.Do(t, "GET", "/v1/nodes", nil).Status == 403 })
		// A newer revision this binary refuses: written by another
		// version, or by hand.
		if err := srvA.DB.PolicyOverride.Create().SetRevision(2).SetUploadedBy("elsewhere").
			SetFiles(map[string]string{"10-narrow.yaml": `"baremetal:node:list": "rule:"`}).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		o.Database, o.PolicyDir = setting, filepath.Join(t.TempDir(), "b")
		srvB := servertest.Start(t, o)
		memberB := srvB.Client()
		memberB.Header = member.Header
		mustStatus(t, memberB.Do(t, "GET", "/v1/nodes", nil), 403)
		if s := readyPolicy(t, memberB); !strings.Contains(s, "PO (broken)") || !strings.Contains(s, "revision 1") {
			t.Errorf("/readyz policy %q does not say the last good revision is in force", s)
		}
		// The running replica keeps it too.
		mustStatus(t, member.Do(t, "GET", "/v1/nodes", nil), 403)
	})
}
