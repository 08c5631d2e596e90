// Package bmctest runs OpenIPMI's ipmi_sim as a real BMC on a loopback
// UDP port for tests, with a chassis-control script that keeps power and
// boot-device state in files the test can read.
package bmctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvilproject/anvil/internal/testport"
)

// User and Password are the simulated BMC's admin account.
const (
	User     = "admin"
	Password = "sim-password"
)

// Sim is a running ipmi_sim.
type Sim struct {
	Port int
	// serial is the machine's serial port when the simulator has SOL
	// (StartSOL): ipmi_sim connects to it as to a TCP serial device.
	serial chan net.Conn
	dir    string
	state  string
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
}

// chassis is the control script: ipmi_sim runs it as
// "chassis 0x20 get power boot" or "chassis 0x20 set power 1 …".
const chassis = `#!/bin/sh
STATE="$IPMI_SIM_STATE"
mc=$1; shift; op=$1; shift
readf() { if [ -s "$STATE/$1" ]; then cat "$STATE/$1"; else echo "$2"; fi; }
case "$op" in
get)
  for name in "$@"; do
    case "$name" in
    power) echo "power:$(readf power 0)" ;;
    boot) echo "boot:$(readf boot default)" ;;
    *) exit 1 ;;
    esac
  done ;;
set)
  while [ $# -ge 2 ]; do
    name=$1; val=$2; shift 2
    echo "$name $val" >> "$STATE/events"
    case "$name" in
    power) echo "$val" > "$STATE/power" ;;
    boot) echo "$val" > "$STATE/boot" ;;
    shutdown) echo 0 > "$STATE/power" ;;
    reset|identify) : ;;
    *) exit 1 ;;
    esac
  done ;;
check) exit 0 ;;
*) exit 2 ;;
esac
exit 0
`

const lanConf = `name "anvilbmc"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a1b2c3d4e5f60718293a4b5c6d7e8f90
  endlan
  chassis_control "%s 0x20"
  user 1 false "" "" user 1 none
  user 2 true "%s" "%s" admin 10 none md2 md5 straight
`

const emu = `mc_setbmc 0x20
mc_add 0x20 0x00 no-device-sdrs 0x01 0x02 0x00 0x9f 0x1291 0x0f02
sel_enable 0x20 1000 0x0a
mc_enable 0x20
`

// Need skips the test when ipmi_sim or ipmitool is missing, except in CI
// where their absence is a failure.
func Need(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required in CI (Debian packages openipmi, ipmitool)", bin)
			}
			t.Skipf("skipping: %s is not installed (Debian packages openipmi, ipmitool)", bin)
		}
	}
}

// Start runs a simulator until the test ends.
func Start(t testing.TB) *Sim { return start(t, false) }

// StartSOL runs a simulator with serial-over-LAN: ipmi_sim's "sol" line
// points at a TCP port the test holds, whose far side is the machine's
// serial port (Serial).
func StartSOL(t testing.TB) *Sim { return start(t, true) }

// Serial is the machine's side of the serial port: what it writes
// reaches a SOL client, what the client types arrives here.
func (s *Sim) Serial(t testing.TB) net.Conn {
	t.Helper()
	select {
	case c := <-s.serial:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("ipmi_sim did not connect to the serial port")
		return nil
	}
}

func start(t testing.TB, sol bool) *Sim {
	t.Helper()
	Need(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	persist := filepath.Join(dir, "persist")
	for _, d := range []string{state, persist} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "chassis.sh")
	if err := os.WriteFile(script, []byte(chassis), 0o755); err != nil {
		t.Fatal(err)
	}
	port := testport.UDP(t)
	conf := fmt.Sprintf(lanConf, port, script, User, Password)
	var serial chan net.Conn
	if sol {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		serial = make(chan net.Conn, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				serial <- c
			}
		}()
		conf += fmt.Sprintf("  sol \"tcp:%s\" 115200\n", ln.Addr())
	}
	if err := os.WriteFile(filepath.Join(dir, "lan.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sim.emu"), []byte(emu), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "power"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Sim{Port: port, dir: dir, state: state, serial: serial}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if err := s.waitAnswer(); err != nil {
		t.Fatal(err)
	}
	return s
}

// run starts ipmi_sim on the simulator's port and state.
func (s *Sim) run() error {
	cmd := exec.Command("ipmi_sim", "-n", "-c", filepath.Join(s.dir, "lan.conf"), "-f", filepath.Join(s.dir, "sim.emu"), "-s", filepath.Join(s.dir, "persist"))
	cmd.Env = append(os.Environ(), "IPMI_SIM_STATE="+s.state)
	log, err := os.OpenFile(filepath.Join(s.dir, "ipmi_sim.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

func (s *Sim) waitAnswer() error {
	for i := 0; i < 100; i++ {
		if s.answers() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _ := os.ReadFile(filepath.Join(s.dir, "ipmi_sim.log"))
	return fmt.Errorf("ipmi_sim did not answer on port %d:\n%s", s.Port, out)
}

// Stop kills the simulator, as a BMC that loses power or its network
// does; its power and boot state stay for Restart.
func (s *Sim) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts a stopped simulator again on the same port and state
// and returns once it answers.
func (s *Sim) Restart() error {
	if err := s.run(); err != nil {
		return err
	}
	return s.waitAnswer()
}

// answers sends an RMCP presence ping.
func (s *Sim) answers() bool {
	conn, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", s.Port))
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := conn.Write([]byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x80, 0x00, 0x00, 0x00}); err != nil {
		return false
	}
	buf := make([]byte, 64)
	_, err = conn.Read(buf)
	return err == nil
}

func (s *Sim) read(name, def string) string {
	b, err := os.ReadFile(filepath.Join(s.state, name))
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return def
	}
	return strings.TrimSpace(string(b))
}

// Power is the simulated chassis power: "1" (on) or "0" (off).
func (s *Sim) Power() string { return s.read("power", "0") }

// Boot is the last boot device the BMC was told.
func (s *Sim) Boot() string { return s.read("boot", "default") }

// Events lists every set the chassis saw, oldest first ("power 1").
func (s *Sim) Events() []string {
	v := s.read("events", "")
	if v == "" {
		return nil
	}
	return strings.Split(v, "\n")
}

// DriverInfo is an ipmi driver_info for this simulator.
func (s *Sim) DriverInfo(password string) map[string]any {
	return map[string]any{"ipmi_address": "127.0.0.1", "ipmi_port": float64(s.Port), "ipmi_username": User,
		"ipmi_password": password, "ipmi_cipher_suite": float64(3)}
}
