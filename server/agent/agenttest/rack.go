package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/testport"
)

// Rack is a set of machines a redfish-sim boots: with Env in the
// simulator's environment, ipa/machine-hook.sh starts the real agent for
// a system that powers on from virtual media or PXE, with the system's
// MACs and the loop disk Machine gave it, and stops it at power off.
type Rack struct {
	Dir string
}

// NewRack makes the machines' directory; agents look their node up at
// apiURL.
func NewRack(t testing.TB, apiURL string) *Rack {
	t.Helper()
	r := &Rack{Dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(r.Dir, "api_url"), []byte(apiURL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The simulator runs a hook path with no arguments: this one runs
	// the reference's hook as privateRun does.
	hook := "#!/bin/sh\nexec unshare --mount --propagation private sh -c '" + privateRunScript + "' " +
		filepath.Join(filepath.Dir(script()), "machine-hook.sh") + "\n"
	if err := os.WriteFile(r.hook(), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	return r
}

// Env is what the simulator needs to run the rack's hook.
func (r *Rack) Env() []string {
	return []string{"SIM_POWER_HOOK=" + r.hook(), "MACHINES_DIR=" + r.Dir,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost"}
}

// hook is the rack's power hook.
func (r *Rack) hook() string { return filepath.Join(r.Dir, "power-hook.sh") }

// InspectionURL makes agents post their inventory to url when they boot.
func (r *Rack) InspectionURL(t testing.TB, url string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.Dir, "inspection_url"), []byte(url+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Machine gives system id a LoopDisk and a free port for its agent, and
// returns the disk. At the test's end its agent, if running, is stopped
// before the disk is detached, and the test fails if a process of it
// remains.
func (r *Rack) Machine(t testing.TB, id string) string {
	t.Helper()
	disk := LoopDisk(t)
	m := filepath.Join(r.Dir, id)
	if err := os.MkdirAll(m, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"disk": disk, "port": strconv.Itoa(testport.TCP(t))} {
		if err := os.WriteFile(filepath.Join(m, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Registered after LoopDisk's detach, so it runs before it.
	t.Cleanup(func() {
		agent := filepath.Join(m, "agent")
		if _, err := os.Stat(agent); err != nil {
			return
		}
		if t.Failed() {
			t.Logf("machine %s: ipa.log (tail):\n%s", id, r.Log(id, 6000))
		}
		pid, _ := os.ReadFile(filepath.Join(agent, "pid"))
		_ = exec.Command(script(), "stop", agent).Run()
		if pgid, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil {
			deadline := time.Now().Add(30 * time.Second)
			for groupAlive(pgid) && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			if groupAlive(pgid) {
				t.Errorf("machine %s: agent processes of group %d remain after stop", id, pgid)
			}
		}
	})
	return disk
}

// Running tells whether system id's agent runs now.
func (r *Rack) Running(id string) bool {
	return exec.Command(script(), "status", filepath.Join(r.Dir, id, "agent")).Run() == nil
}

// Kill stops system id's agent at once, as a machine losing power.
func (r *Rack) Kill(id string) {
	_ = exec.Command(script(), "stop", filepath.Join(r.Dir, id, "agent")).Run()
}

// Log is the last n bytes of system id's agent log and the hook's log.
func (r *Rack) Log(id string, n int) string {
	log, _ := os.ReadFile(filepath.Join(r.Dir, id, "agent", "ipa.log"))
	hook, _ := os.ReadFile(filepath.Join(r.Dir, "hook.log"))
	return string(log[max(0, len(log)-n):]) + "\n--- hook.log:\n" + string(hook)
}

// Stopped waits up to within for system id's agent to stop and says
// whether it did: the simulator runs its power hook detached, so the
// agent goes a moment after the BMC reports the machine off.
func (r *Rack) Stopped(id string, within time.Duration) bool {
	for deadline := time.Now().Add(within); r.Running(id); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// Power runs the rack's hook for system id as redfish-sim does when the
// system's power changes, for tests whose BMC is another simulator:
// power On or Off, boot the device it comes up from (Pxe boots the
// agent, Hdd the disk), macs its NICs (comma-separated). The agent
// starts before Power returns.
func (r *Rack) Power(id, power, boot, macs string) error {
	cmd := exec.Command(r.hook())
	cmd.Env = append(append(os.Environ(), r.Env()...), "SIM_SYSTEM_ID="+id, "SIM_POWER="+power, "SIM_BOOT_DEVICE="+boot, "SIM_MACS="+macs)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("machine-hook.sh %s %s: %v: %s", id, power, err, out)
	}
	return nil
}
