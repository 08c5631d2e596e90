package api_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/store/storetest"
)

// The baremetal CLI runs hundreds of times in this package's tests, and
// each run spends most of a CPU-second importing openstacksdk before it
// reads its arguments. testdata/baremetal-forkserver.py imports it once
// per test process and forks a child per run that calls the CLI's own
// main() with the run's arguments, environment, directory and streams;
// TestBaremetalForkServerMatchesCLI checks it answers as
// /usr/bin/baremetal does.
var forkServer struct {
	once sync.Once
	cmd  *exec.Cmd
	dir  string
	sock string
	err  error
}

func startForkServer() {
	fs := &forkServer
	fs.dir, fs.err = os.MkdirTemp("", "anvil-baremetal-")
	if fs.err != nil {
		return
	}
	fs.sock = filepath.Join(fs.dir, "sock")
	// /usr/bin/baremetal's interpreter, with the warnings its runs here
	// silence silenced from the start.
	fs.cmd = exec.Command("/usr/bin/python3", "testdata/baremetal-forkserver.py", fs.sock)
	fs.cmd.Env = append(os.Environ(), "PYTHONWARNINGS=ignore")
	fs.cmd.Stderr = os.Stderr
	out, err := fs.cmd.StdoutPipe()
	if err != nil {
		fs.err = err
		return
	}
	if fs.err = fs.cmd.Start(); fs.err != nil {
		return
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			fs.err = fmt.Errorf("the baremetal fork server did not start: %w", err)
		}
	case <-time.After(2 * time.Minute):
		fs.err = errors.New("the baremetal fork server did not start within 2 minutes")
	}
}

// stopBaremetalServer ends the fork server, if this process started one.
func stopBaremetalServer() error {
	fs := &forkServer
	if fs.cmd == nil || fs.cmd.Process == nil {
		return nil
	}
	err := fs.cmd.Process.Kill()
	_ = fs.cmd.Wait() // killed: its status says so
	return errors.Join(err, os.RemoveAll(fs.dir))
}

// exitCode is a CLI run that ended with a status other than 0.
type exitCode int

func (c exitCode) Error() string { return "exit status " + strconv.Itoa(int(c)) }

// runBaremetal runs the baremetal CLI with args and env (KEY=value, as
// exec.Cmd's) through the fork server, writing its output to stdout and
// stderr; a status other than 0 is an exitCode.
func runBaremetal(args, env []string, stdout, stderr io.Writer) error {
	forkServer.once.Do(startForkServer)
	if forkServer.err != nil {
		return forkServer.err
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	envMap := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envMap[k] = v // later wins, as exec.Cmd's Env
	}
	msg, err := json.Marshal(map[string]any{"argv": args, "env": envMap, "cwd": wd})
	if err != nil {
		return err
	}
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return err
	}
	defer errR.Close()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: forkServer.sock, Net: "unix"})
	if err != nil {
		outW.Close()
		errW.Close()
		return err
	}
	defer conn.Close()
	rights := syscall.UnixRights(int(stdin.Fd()), int(outW.Fd()), int(errW.Fd()))
	_, _, err = conn.WriteMsgUnix(msg, rights, nil)
	// The child holds its own copies now: the pipes end when it does.
	outW.Close()
	errW.Close()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var outErr, errErr error
	wg.Add(2)
	go func() { defer wg.Done(); _, outErr = io.Copy(stdout, outR) }()
	go func() { defer wg.Done(); _, errErr = io.Copy(stderr, errR) }()
	status, readErr := bufio.NewReader(conn).ReadString('\n')
	wg.Wait()
	if err := errors.Join(outErr, errErr); err != nil {
		return err
	}
	if readErr != nil {
		return fmt.Errorf("the baremetal fork server's child ended without a status: %w", readErr)
	}
	code, err := strconv.Atoi(strings.TrimSpace(status))
	if err != nil {
		return fmt.Errorf("the baremetal fork server's child sent status %q", status)
	}
	if code != 0 {
		return exitCode(code)
	}
	return nil
}

var requestID = regexp.MustCompile(`req-[0-9a-f-]{36}`)

// TestBaremetalForkServerMatchesCLI: the fork server answers as
// /usr/bin/baremetal does, output, errors and status, for a listing, a
// creation, a refusal, a usage error and the version.
func TestBaremetalForkServerMatchesCLI(t *testing.T) {
	srv, _ := start(t, storetest.Setting(t, "sqlite"))
	bm := newCLI(t, srv.URL) // skips, or fails in CI, without the CLI
	env := cliEnv()
	base := append([]string{"--os-baremetal-api-version", "1.78"}, bm.base...)
	type result struct {
		out, err string
		code     int
	}
	status := func(err error) int {
		var ee *exec.ExitError
		var ec exitCode
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		case errors.As(err, &ec):
			return int(ec)
		}
		t.Fatal(err)
		return -1
	}
	direct := func(args ...string) result {
		cmd := exec.Command("baremetal", append(base, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, env
		code := status(cmd.Run())
		return result{out.String(), errb.String(), code}
	}
	forked := func(args ...string) result {
		var out, errb strings.Builder
		code := status(runBaremetal(append(base, args...), env, &out, &errb))
		return result{out.String(), errb.String(), code}
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
	}{
		{"create", []string{"node", "create", "--driver", "fake", "--name", "fork-%s", "-f", "json", "-c", "name", "-c", "driver"}, 0},
		{"list", []string{"node", "list", "-f", "value", "-c", "Name", "--sort", "name"}, 0},
		{"refusal", []string{"node", "show", "fork-none"}, 1},
		{"usage", []string{"node", "list", "--no-such-option"}, 2},
		{"version", []string{"--version"}, 0},
	} {
		run := func(how string, f func(...string) result) result {
			args := slices.Clone(tc.args)
			for i, a := range args {
				if strings.Contains(a, "%s") {
					args[i] = fmt.Sprintf(a, how) // a name of its own for each way
				}
			}
			return f(args...)
		}
		d, f := run("direct", direct), run("forked", forked)
		// Each request has an ID of its own.
		d.err, f.err = requestID.ReplaceAllString(d.err, "req-ID"), requestID.ReplaceAllString(f.err, "req-ID")
		if tc.name == "create" {
			f.out = strings.ReplaceAll(f.out, "fork-forked", "fork-direct")
		}
		if d.code != tc.wantCode {
			t.Errorf("%s: baremetal exited %d, want %d\nstdout: %s\nstderr: %s", tc.name, d.code, tc.wantCode, d.out, d.err)
		}
		if f != d {
			t.Errorf("%s: the fork server's run differs from baremetal's\nforked: %+v\ndirect: %+v", tc.name, f, d)
		}
	}
}
