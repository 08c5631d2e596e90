package deploy_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvilproject/anvil/internal/testport"
)

// podman runs podman as root with what runs here and on an ordinary
// host alike: runc with the cgroupfs manager, since this machine mounts
// cgroups in hybrid mode, which crun (podman's default) refuses; and
// file and process limits within the caller's hard limits, which sit
// below podman's defaults here and may not be raised.
func podman(args ...string) *exec.Cmd {
	base := []string{"--cgroup-manager", "cgroupfs"}
	if rc, err := exec.LookPath("runc"); err == nil {
		base = append(base, "--runtime", rc)
	}
	return exec.Command("podman", append(base, args...)...)
}

// ulimits are podman flags that keep the container's open-file and
// process limits at or below the caller's: podman's defaults are above
// them here, and the container's init, without CAP_SYS_RESOURCE, may not
// raise a hard limit.
func ulimits() []string {
	var out []string
	for _, l := range []struct {
		name string
		res  int
		most uint64
	}{{"nofile", unix.RLIMIT_NOFILE, 1 << 16}, {"nproc", unix.RLIMIT_NPROC, 1 << 12}} {
		var r unix.Rlimit
		if err := unix.Getrlimit(l.res, &r); err == nil {
			n := min(r.Cur, l.most)
			out = append(out, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, n, n))
		}
	}
	return out
}

// TestImageInPodman runs the image archive in podman as an operator
// would: its entrypoint, as its user, the SQLite state in a volume from
// the host; only the listen address is given, on the host's network, so
// the test can reach it. It answers /readyz, writes its database into
// the volume as the image's user, and stops on podman stop. The image's
// ipmitool (Debian's, with its libraries) runs in it too.
func TestImageInPodman(t *testing.T) {
	needRoot(t, "podman here runs rootful")
	need(t, "podman", "podman")
	need(t, "runc", "runc")
	d := mustDist(t)
	archive := only(t, filepath.Join(d, "anvil-*-linux-amd64.oci.tar"))

	state := t.TempDir()
	const uid = 65532 // the image's user (TestImage checks it)
	if err := os.Chown(state, uid, uid); err != nil {
		t.Fatal(err)
	}
	// Loaded first, so the test removes exactly the image it added.
	loaded, err := podman("load", "--quiet", "--input", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("podman load: %v\n%s", err, loaded)
	}
	image := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(loaded)), "Loaded image:"))
	name := fmt.Sprintf("anvil-test-%d", time.Now().UnixNano())
	addr := fmt.Sprintf("127.0.0.1:%d", testport.TCP(t))
	args := append([]string{"run", "--rm", "--name", name, "--network", "host", "--pull", "never",
		"-e", "ANVIL_LISTEN=" + addr, "-v", state + ":/var/lib/anvil"}, ulimits()...)
	run := podman(append(args, image)...)
	var out strings.Builder
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		_ = podman("rm", "--force", "--time", "0", name).Run()
		_ = podman("rmi", "--force", image).Run()
	})

	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET /readyz: %d", resp.StatusCode)
			}
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the container ended (%v) without serving:\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not serve on %s in 2 minutes:\n%s", addr, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}

	st, err := os.Stat(filepath.Join(state, "anvil.db"))
	if err != nil {
		t.Fatalf("no database in the volume: %v", err)
	}
	if owner := st.Sys().(*syscall.Stat_t).Uid; owner != uid {
		t.Errorf("database owned by %d on the host, not the image user %d", owner, uid)
	}

	if b, err := podman("stop", "--time", "20", name).CombinedOutput(); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, b)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("podman run did not end after podman stop:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "anvil serving") {
		t.Errorf("the container's log lacks anvil's start line:\n%s", out.String())
	}

	// A command after the image replaces serve: operator commands run
	// in the image as they do on a host.
	ver, err := podman(append(append([]string{"run", "--rm", "--network", "none", "--pull", "never"}, ulimits()...), image, "version")...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(ver), "anvil ") || strings.Contains(string(ver), "serving") {
		t.Errorf("podman run IMAGE version: %v\n%s", err, ver)
	}
	// The conductor's IPMI driver runs ipmitool from PATH: it is there
	// and runs, as the image's user.
	ipmi, err := podman(append(append([]string{"run", "--rm", "--network", "none", "--pull", "never", "--entrypoint", "ipmitool"}, ulimits()...), image, "-V")...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(ipmi), "ipmitool version ") {
		t.Errorf("podman run --entrypoint ipmitool IMAGE -V: %v\n%s", err, ipmi)
	}
}
