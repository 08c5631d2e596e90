// Package testport gives tests ports for servers they start in other
// processes (the agent, ipmi_sim, anvil serve), which must be told a port
// before they bind it.
//
// A port asked of the kernel with :0 comes from the ephemeral range, from
// which every outgoing connection on the machine also draws its local
// port: between the test closing its probe and the child binding, a
// connection can take it, and the child fails with "address already in
// use" (seen with the agent while the suite ran server/api's shards beside
// the other packages). These ports come from below that range, where only
// servers bind, each held by a lock file across the machine's test
// processes for the life of the test.
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// lowest is the lowest port handed out: above the well-known and
// commonly configured service ports.
const lowest = 20000

// TCP returns a free TCP port on 127.0.0.1, reserved until t ends.
func TCP(t testing.TB) int { return free(t, "tcp") }

// UDP returns a free UDP port on 127.0.0.1, reserved until t ends.
func UDP(t testing.TB) int { return free(t, "udp") }

func free(t testing.TB, network string) int {
	t.Helper()
	top := ephemeralLow() - 1
	if top-lowest < 1000 {
		t.Fatalf("testport: the ephemeral port range starts at %d, leaving too few ports above %d", top+1, lowest)
	}
	start := lowest + rand.IntN(top-lowest+1)
	for i := 0; i <= top-lowest; i++ {
		p := lowest + (start-lowest+i)%(top-lowest+1)
		lock, ok := Hold(network, p)
		if !ok {
			continue
		}
		t.Cleanup(func() { lock.Close() })
		return p
	}
	t.Fatalf("testport: no free %s port in %d-%d", network, lowest, top)
	return 0
}

// Hold reserves a given port across the machine's test processes, for
// callers that keep ports of their own (the Redfish simulator's fixed
// range): it takes the port's lock file and checks that nothing listens
// there. The port is held until the returned file is closed.
func Hold(network string, port int) (*os.File, bool) {
	lock, ok := reserve(port)
	if !ok {
		return nil, false
	}
	if !bindable(network, port) {
		lock.Close()
		return nil, false
	}
	return lock, true
}

// reserve takes the port's lock file, exclusively and without waiting;
// the lock goes with the file's closing (or the process's end).
func reserve(port int) (*os.File, bool) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("anvil-port-%d.lock", port)), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

func bindable(network string, port int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if network == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	l, err := net.Listen("tcp", addr)
	if err == nil {
		l.Close()
	}
	return err == nil
}

// ephemeralLow is where the kernel's ephemeral range starts (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}
