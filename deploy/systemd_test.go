package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDebUnderSystemd installs the .deb with dpkg in a Debian bookworm
// root (mmdebstrap, from the machine's apt sources), enables the unit as
// an operator would, boots the root's systemd in a container
// (systemd-nspawn) and checks what the issue asks of the package: the
// service starts under its hardening as the anvil user, answers
// /healthz, and installing the package again restarts it on the new
// binary with its state kept. TestUnitVerifies and TestUnitCommandServes
// check the unit without systemd running it; this one has it run.
func TestDebUnderSystemd(t *testing.T) {
	needRoot(t, "mmdebstrap and systemd-nspawn")
	need(t, "mmdebstrap", "mmdebstrap")
	need(t, "systemd-nspawn", "systemd-container")
	deb := only(t, filepath.Join(mustDist(t), "anvil_*_amd64.deb"))
	root := filepath.Join(t.TempDir(), "root")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// ipmitool is the package's dependency; curl asks the service.
	strap := exec.CommandContext(ctx, "mmdebstrap", "--variant=minbase",
		"--include=systemd,systemd-sysv,dbus,ipmitool,ca-certificates,curl",
		"--customize-hook=copy-in "+deb+" /root",
		`--customize-hook=chroot "$1" sh -c 'dpkg -i /root/anvil_*.deb && systemctl enable anvil.service'`,
		"bookworm", root)
	if out, err := strap.CombinedOutput(); err != nil {
		t.Fatalf("mmdebstrap: %v\n%s", err, tail(out))
	}

	console, err := os.Create(filepath.Join(t.TempDir(), "console"))
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	// No registration with (nor a scope from) the machine's systemd,
	// which this machine does not run.
	boot := exec.Command("systemd-nspawn", "-D", root, "--boot", "--register=no", "--keep-unit",
		"--console=pipe", "--private-network", "--machine=anvil-deb-test")
	boot.Stdout, boot.Stderr = console, console
	if err := boot.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- boot.Wait() }()
	initPID := containerInit(t, boot.Process.Pid, done, console.Name())
	in := func(args ...string) (string, error) {
		c := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(initPID), "-a"}, args...)...)
		out, err := c.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	t.Cleanup(func() {
		// SIGRTMIN+4 (38, as glibc and systemd number it) asks systemd
		// to power off; what is left after 30 s is killed.
		_ = syscall.Kill(initPID, syscall.Signal(38))
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = boot.Process.Kill()
			<-done
		}
	})
	must := func(args ...string) string {
		t.Helper()
		out, err := in(args...)
		if err != nil {
			t.Fatalf("%s in the container: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	// Until the container's systemd has opened its socket, systemctl
	// cannot reach it; until it runs as the container's PID 1 (on a busy
	// machine, a while after the boot began), systemctl says "offline".
	var state string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if state, _ = in("systemctl", "is-system-running", "--wait"); !strings.Contains(state, "Failed to connect to bus") && state != "offline" {
			break
		}
	}
	if state != "running" {
		failed, _ := in("systemctl", "--failed", "--no-pager")
		t.Fatalf("the container's systemd is %q:\n%s", state, failed)
	}
	if state, _ := in("systemctl", "is-active", "anvil.service"); state != "active" {
		log, _ := in("journalctl", "-u", "anvil.service", "--no-pager")
		t.Fatalf("anvil.service is %q:\n%s", state, log)
	}
	healthy := func() string {
		t.Helper()
		var out string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if out, _ = in("curl", "-sS", "--max-time", "5", "http://127.0.0.1:6385/healthz"); out == "ok" {
				break
			}
		}
		return out
	}
	if h := healthy(); h != "ok" {
		t.Fatalf("/healthz: %q", h)
	}
	props := map[string]string{}
	for _, l := range strings.Split(must("systemctl", "show", "anvil.service",
		"-p", "User", "-p", "ProtectSystem", "-p", "NoNewPrivileges", "-p", "StateDirectory", "-p", "MainPID"), "\n") {
		k, v, _ := strings.Cut(l, "=")
		props[k] = v
	}
	for k, want := range map[string]string{"User": "anvil", "ProtectSystem": "strict", "NoNewPrivileges": "yes", "StateDirectory": "anvil"} {
		if props[k] != want {
			t.Errorf("anvil.service %s=%q, want %q", k, props[k], want)
		}
	}
	if owner := must("stat", "-c", "%U", "/proc/"+props["MainPID"]); owner != "anvil" {
		t.Errorf("the service runs as %q", owner)
	}
	if owner := must("stat", "-c", "%U %a", "/var/lib/anvil/anvil.db"); owner != "anvil 600" {
		t.Errorf("the state database is %q, want anvil's, mode 600", owner)
	}

	// An upgrade: the package installed again over itself restarts the
	// running service (postinst's try-restart) and keeps its state.
	up := must("dpkg", "-i", "/root/"+filepath.Base(deb))
	// It took a backup first, said where, and kept it the service's own.
	m := regexp.MustCompile(`backed up the database before the upgrade to (/var/lib/anvil/backups/\S+\.db)`).FindStringSubmatch(up)
	if m == nil {
		t.Errorf("the upgrade did not say where it backed the database up:\n%s", up)
	} else if st := must("stat", "-c", "%U %a %s", m[1]); !strings.HasPrefix(st, "anvil 600 ") || strings.HasSuffix(st, " 0") {
		t.Errorf("the backup %s is %q, want anvil's, mode 600, not empty", m[1], st)
	}
	var pid string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if pid = must("systemctl", "show", "anvil.service", "-p", "MainPID", "--value"); pid != props["MainPID"] && pid != "0" {
			break
		}
	}
	if pid == props["MainPID"] || pid == "0" {
		t.Errorf("after dpkg -i the service's main PID is %s (before: %s): not restarted", pid, props["MainPID"])
	}
	if h := healthy(); h != "ok" {
		t.Fatalf("/healthz after the upgrade: %q", h)
	}
	if n := strings.Count(must("journalctl", "-u", "anvil.service", "--no-pager"), "First start: created system admin"); n != 1 {
		t.Errorf("the first-start admin was created %d times, want once: the restart kept the state", n)
	}
}

// containerInit waits for the container's init (systemd-nspawn's child)
// and returns its PID.
func containerInit(t *testing.T, nspawn int, done <-chan error, consoleFile string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-done:
			out, _ := os.ReadFile(consoleFile)
			t.Fatalf("systemd-nspawn ended: %v\n%s", err, tail(out))
		default:
		}
		kids, _ := os.ReadFile("/proc/" + strconv.Itoa(nspawn) + "/task/" + strconv.Itoa(nspawn) + "/children")
		for _, f := range strings.Fields(string(kids)) {
			if comm, _ := os.ReadFile("/proc/" + f + "/comm"); strings.TrimSpace(string(comm)) == "systemd" {
				pid, _ := strconv.Atoi(f)
				return pid
			}
		}
	}
	out, _ := os.ReadFile(consoleFile)
	t.Fatalf("no systemd in the container after 30 s\n%s", tail(out))
	return 0
}

// tail is the end of a long command output.
func tail(b []byte) string {
	return string(b[max(0, len(b)-4000):])
}
