// Package agenttest runs the real ironic-python-agent
// (shared/reference/ipa) as one simulated machine for tests: its only
// disk a loop device the test makes and detaches, its NICs the MACs the
// test names.
package agenttest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/reference"
	"github.com/anvilproject/anvil/internal/testport"
)

// script is start.sh of the shared reference copy, or of ANVIL_IPA_DIR.
func script() string {
	if d := os.Getenv("ANVIL_IPA_DIR"); d != "" {
		return filepath.Join(d, "start.sh")
	}
	return reference.Path("ipa", "start.sh")
}

// Need skips the test (outside CI) or fails it (in CI) when the real
// agent cannot run here, saying why: it needs root for loop devices,
// the tools it partitions and images with, udevadm (it does not start
// without it) and its Debian packages.
func Need(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "loop devices need root"
	} else if _, err := os.Stat(script()); err != nil {
		why = "no " + script() + " (set ANVIL_IPA_DIR)"
	} else if _, err := os.Stat("/dev/loop-control"); err != nil {
		why = "no /dev/loop-control"
	}
	// hdparm: the agent's erase_devices asks it about each disk (ATA
	// secure erase) before overwriting it, as every agent ramdisk has it.
	for _, tool := range []string{"losetup", "sgdisk", "qemu-img", "unshare", "udevadm", "hdparm"} {
		if why != "" {
			break
		}
		if _, err := exec.LookPath(tool); err != nil {
			why = tool + " is not installed"
		}
	}
	if why == "" {
		if missing := agentModules(); missing != "" {
			why = "the agent's Debian packages are missing (start.sh installs them: python3-eventlet, python3-oslo.*, python3-ironic-lib, …): " + missing
		}
	}
	if why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("the real ironic-python-agent is required in CI: %s", why)
		}
		t.Skipf("skipping the real ironic-python-agent: %s", why)
	}
}

// agentModules is what importing the agent's main modules in Debian's
// python3 said when it failed, or "". It is asked once per test process:
// the imports cost about a CPU-second.
var agentModules = sync.OnceValue(func() string {
	out, err := exec.Command("/usr/bin/python3", "-c", "import eventlet, oslo_service, ironic_lib, pyudev, pint, tooz").CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)) + " (" + err.Error() + ")"
	}
	return ""
})

// LoopDisk makes a sparse 5 GiB file a loop device for the test's life:
// the agent's only disk, never a device of the host. The agent wants at
// least 4 GiB without root-device hints; the sparse file costs only what
// is written.
func LoopDisk(t testing.TB) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(5 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	if !strings.HasPrefix(dev, "/dev/loop") {
		t.Fatalf("losetup gave %q, not a loop device", dev)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v %s", dev, err, out)
		}
	})
	return dev
}

// privateRunScript runs "$0" "$@" with /run/ironic-python-agent a
// private tmpfs (in a mount namespace of its own, which the agent that
// start.sh starts inherits). The agent writes its TLS certificate and key
// to that fixed directory: agents of tests running at once (server/api's
// shards) overwrote each other's files, and one then loaded a key that
// did not match its certificate and died. Its temporary directory
// (TMPDIR, which Python's tempfile follows) is a private tmpfs too: the
// agent downloads an image it does not stream to <tmp>/<image id>, the
// URL's file name, and agents of tests at once wrote each other's
// disk.raw there, so one wrote another test's image to its disk.
const privateRunScript = `mkdir -p /run/ironic-python-agent /run/anvil-agent-tmp && mount -t tmpfs -o size=1m,mode=0700 anvil-ipa /run/ironic-python-agent && mount -t tmpfs -o size=1g,mode=1777 anvil-ipa-tmp /run/anvil-agent-tmp && export TMPDIR=/run/anvil-agent-tmp && exec "$0" "$@"`

// privateRun is the command that runs path with args that way.
func privateRun(path string, args ...string) *exec.Cmd {
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", privateRunScript, path}, args...)...)
}

// Machine is one running agent.
type Machine struct {
	// Dir holds the agent's copy, configuration and ipa.log.
	Dir string
	// Port is where the agent's own API listens (its callback URL's).
	Port int
}

// Start boots the agent on disk (a LoopDisk) with the NICs macs
// (comma-separated), looking its node up at apiURL; env adds variables
// (oslo.config reads OS_<group>__<option>). At the test's end the agent
// is stopped (even one that never came up), the test fails if any of its
// processes remain, and a failed test logs the end of ipa.log.
func Start(t testing.TB, disk, macs, apiURL string, env ...string) *Machine {
	t.Helper()
	m := &Machine{Dir: t.TempDir(), Port: testport.TCP(t)}
	cmd := privateRun(script(), "start", m.Dir, strconv.Itoa(m.Port), apiURL)
	cmd.Env = append(append(os.Environ(), "SIMHW_DISK="+disk, "SIMHW_MACS="+macs,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost"), env...)
	out, err := cmd.CombinedOutput()
	pid, pidErr := os.ReadFile(filepath.Join(m.Dir, "pid"))
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	if pidErr == nil {
		// Stopped at the end even if it never came up.
		t.Cleanup(func() { m.stop(t, pgid) })
	}
	if err != nil {
		began := time.Now()
		if !bytes.Contains(out, []byte("no lookup seen in 10 s")) || !m.waitLookup(bootWait) {
			t.Fatalf("start.sh: %v\n%s", err, out)
		}
		t.Logf("the agent reached lookup %s after start.sh's 10 s", time.Since(began).Round(time.Second))
	}
	if pidErr != nil {
		t.Fatal(pidErr)
	}
	return m
}

// bootWait is how long Start waits for an agent that start.sh gave up
// on: start.sh allows 10 s to import the agent and reach lookup, which
// took longer on this 2-core machine while the whole suite ran (load
// average 14).
const bootWait = 60 * time.Second

// waitLookup waits up to d for what start.sh waits for, the agent alive
// and looking up its node (or serving its API), and says whether it came.
func (m *Machine) waitLookup(d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if exec.Command(script(), "status", m.Dir).Run() != nil {
			return false // exited: start.sh's output says what it logged
		}
		if m.lookingUp() {
			return true
		}
	}
	return false
}

// lookingUp says whether the agent's log shows it looking up its node or
// serving its API: what start.sh waits for.
func (m *Machine) lookingUp() bool {
	log, _ := os.ReadFile(filepath.Join(m.Dir, "ipa.log"))
	return bytes.Contains(log, []byte("Looking up node")) || bytes.Contains(log, []byte("Starting the API"))
}

// stop stops the agent and fails t if any process of its group remains;
// a failed test logs the end of ipa.log.
func (m *Machine) stop(t testing.TB, pgid int) {
	if out, err := exec.Command(script(), "stop", m.Dir).CombinedOutput(); err != nil {
		t.Errorf("start.sh stop: %v %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for groupAlive(pgid) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if groupAlive(pgid) {
		t.Errorf("agent processes of group %d remain after stop", pgid)
	}
	if t.Failed() {
		t.Logf("ipa.log (tail):\n%s", m.LogTail(4000))
	}
}

// LogTail is the last n bytes of the agent's log.
func (m *Machine) LogTail(n int) string {
	log, _ := os.ReadFile(filepath.Join(m.Dir, "ipa.log"))
	return string(log[max(0, len(log)-n):])
}

// groupAlive tells whether any live (non-zombie) process is left in the
// process group the agent was started in.
func groupAlive(pgid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}
