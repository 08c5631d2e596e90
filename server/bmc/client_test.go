package bmc_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	bmctest.StopShared()
	os.Exit(code)
}

var fast = bmc.Options{Timeout: 10 * time.Second, PowerPoll: 100 * time.Millisecond}

// bmcUnderTest is one simulated BMC behind one driver, with a way to read
// the power the simulator itself reports and to force it.
type bmcUnderTest struct {
	driver string
	info   map[string]any
	power  func(t *testing.T) string // bmc.PowerOn / bmc.PowerOff per the simulator
}

func redfishBMC(t *testing.T, sim *bmctest.Redfish) bmcUnderTest {
	return bmcUnderTest{"redfish", sim.DriverInfo("1"), func(t *testing.T) string {
		if sim.Power(t, "1") == "On" {
			return bmc.PowerOn
		}
		return bmc.PowerOff
	}}
}

func ipmiBMC(sim *bmctest.Sim) bmcUnderTest {
	return bmcUnderTest{"ipmi", sim.DriverInfo(bmctest.Password), func(*testing.T) string {
		if sim.Power() == "1" {
			return bmc.PowerOn
		}
		return bmc.PowerOff
	}}
}

// TestPowerVerbsEndInTheReportedState runs every power verb from on and
// from off against both simulators: Power returns only once the BMC itself
// reports the state it returns, which is the state the verb promises.
func TestPowerVerbsEndInTheReportedState(t *testing.T) {
	for _, mk := range []func(t *testing.T) bmcUnderTest{
		func(t *testing.T) bmcUnderTest { return redfishBMC(t, bmctest.SharedRedfish(t)) },
		func(t *testing.T) bmcUnderTest { return ipmiBMC(bmctest.Start(t)) },
	} {
		b := mk(t)
		t.Run(b.driver, func(t *testing.T) {
			ctx := context.Background()
			c, err := bmc.Open(b.driver, "n1", b.info, fast)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, tc := range []struct{ from, verb, want string }{
				{bmc.PowerOff, bmc.PowerOn, bmc.PowerOn},
				{bmc.PowerOn, bmc.PowerOff, bmc.PowerOff},
				{bmc.PowerOn, bmc.SoftPowerOff, bmc.PowerOff},
				{bmc.PowerOn, bmc.Rebooting, bmc.PowerOn},
				{bmc.PowerOff, bmc.Rebooting, bmc.PowerOn},
				{bmc.PowerOn, bmc.SoftRebooting, bmc.PowerOn},
				{bmc.PowerOff, bmc.SoftRebooting, bmc.PowerOn},
			} {
				if _, err := bmc.Power(ctx, c, tc.from, 20*time.Second, 100*time.Millisecond); err != nil {
					t.Fatalf("getting to %s: %v", tc.from, err)
				}
				if got := b.power(t); got != tc.from {
					t.Fatalf("setup: simulator reports %s, want %s", got, tc.from)
				}
				final, err := bmc.Power(ctx, c, tc.verb, 20*time.Second, 100*time.Millisecond)
				if err != nil || final != tc.want {
					t.Fatalf("%s from %s: %q, %v", tc.verb, tc.from, final, err)
				}
				if got := b.power(t); got != tc.want {
					t.Fatalf("%s from %s returned %s but the simulator reports %s", tc.verb, tc.from, final, got)
				}
				if st, _ := c.PowerState(ctx); st != tc.want {
					t.Fatalf("%s from %s: PowerState reads %s", tc.verb, tc.from, st)
				}
			}
		})
	}
}

func TestRedfishRebootUsesTheBMCRestart(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	ctx := context.Background()
	c, _ := bmc.Open("redfish", "n1", sim.DriverInfo("1"), fast)
	defer c.Close()
	if _, err := bmc.Power(ctx, c, bmc.PowerOn, 20*time.Second, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	before := len(sim.Bodies(t))
	if _, err := bmc.Power(ctx, c, bmc.Rebooting, 20*time.Second, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := bmc.Power(ctx, c, bmc.SoftRebooting, 20*time.Second, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	bodies := strings.Join(sim.Bodies(t)[before:], "\n")
	if !strings.Contains(bodies, `"ForceRestart"`) || !strings.Contains(bodies, `"GracefulRestart"`) || strings.Contains(bodies, `"ForceOff"`) {
		t.Fatalf("reboots should be ForceRestart and GracefulRestart, no ForceOff:\n%s", bodies)
	}
}

// TestPowerTimeoutIsAnError: a BMC slower than the deadline fails the
// action with a clear kind instead of reporting success.
func TestPowerTimeoutIsAnError(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	c, _ := bmc.Open("redfish", "n1", sim.DriverInfo("1"), fast)
	defer c.Close()
	ctx := context.Background()
	if _, err := bmc.Power(ctx, c, bmc.PowerOff, 20*time.Second, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The simulator takes at least 0.2 s; the deadline is shorter.
	_, err := bmc.Power(ctx, c, bmc.PowerOn, 100*time.Millisecond, 100*time.Millisecond)
	if !errors.Is(err, bmc.ErrPowerTimeout) || !strings.Contains(err.Error(), "still reports power off") {
		t.Fatalf("slow BMC: %v", err)
	}
}

func TestRedfishBootDeviceKeepsTheBootMode(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	ctx := context.Background()
	c, _ := bmc.Open("redfish", "n1", sim.DriverInfo("1"), fast)
	defer c.Close()
	if _, mode, _ := sim.Boot(t, "1"); mode != "UEFI" {
		t.Fatalf("simulator starts in %q, expected UEFI", mode)
	}
	before := len(sim.Bodies(t))
	for _, dev := range []string{"pxe", "disk", "cdrom"} {
		if err := c.SetBootDevice(ctx, dev, dev == "disk", ""); err != nil {
			t.Fatal(err)
		}
		target, mode, _ := sim.Boot(t, "1")
		if mode != "UEFI" || target != map[string]string{"pxe": "Pxe", "disk": "Hdd", "cdrom": "Cd"}[dev] {
			t.Fatalf("after %s: target %q mode %q", dev, target, mode)
		}
		b, err := c.BootDevice(ctx)
		if err != nil || b.Device != dev {
			t.Fatalf("read back %+v, %v; want %s", b, err, dev)
		}
	}
	for _, body := range sim.Bodies(t)[before:] {
		if strings.Contains(body, "BootSourceOverrideMode") {
			t.Fatalf("a boot device change sent a boot mode: %s", body)
		}
	}
	if err := c.SetBootDevice(ctx, "pxe", false, "bios"); err != nil {
		t.Fatal(err)
	}
	if _, mode, _ := sim.Boot(t, "1"); mode != "Legacy" {
		t.Fatalf("asked for bios mode, got %q", mode)
	}
	if err := c.SetBootDevice(ctx, "pxe", false, "uefi"); err != nil {
		t.Fatal(err)
	}
	if _, mode, _ := sim.Boot(t, "1"); mode != "UEFI" {
		t.Fatalf("asked for uefi mode, got %q", mode)
	}
	if err := c.SetBootDevice(ctx, "safe", false, ""); !errors.Is(err, bmc.ErrUnsupported) {
		t.Fatalf("safe on redfish: %v", err)
	}
	if slices := bmc.BootDevices("redfish", nil); strings.Contains(strings.Join(slices, ","), "safe") {
		t.Fatalf("redfish lists safe: %v", slices)
	}
}

func TestRedfishAuthTypes(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	ctx := context.Background()
	for _, auth := range []string{"basic", "session", "auto"} {
		before := len(sim.Requests(t))
		info := sim.DriverInfo("1")
		info["redfish_auth_type"] = auth
		c, err := bmc.Open("redfish", "n1", info, fast)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := c.PowerState(ctx); err != nil || (st != bmc.PowerOn && st != bmc.PowerOff) {
			t.Fatalf("%s: %q, %v", auth, st, err)
		}
		c.Close()
		sessions := 0
		for _, r := range sim.Requests(t)[before:] {
			if strings.HasPrefix(r, "POST /redfish/v1/SessionService/Sessions 201") {
				sessions++
			}
		}
		if want := map[string]int{"basic": 0, "session": 1, "auto": 1}[auth]; sessions != want {
			t.Fatalf("%s opened %d sessions, want %d", auth, sessions, want)
		}
		info["redfish_password"] = "wrong-secret-123"
		bad, _ := bmc.Open("redfish", "n1", info, fast)
		_, err = bad.PowerState(ctx)
		if !errors.Is(err, bmc.ErrAuth) || strings.Contains(err.Error(), "wrong-secret-123") {
			t.Fatalf("%s with a wrong password: %v", auth, err)
		}
	}
}

func TestRedfishVerifyCA(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	ctx := context.Background()
	for _, tc := range []struct {
		verify any
		ok     bool
	}{{nil, false}, {true, false}, {"true", false}, {sim.CAPEM, true}, {false, true}} {
		info := sim.DriverInfo("1")
		if tc.verify == nil {
			delete(info, "redfish_verify_ca")
		} else {
			info["redfish_verify_ca"] = tc.verify
		}
		c, err := bmc.Open("redfish", "n1", info, fast)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.PowerState(ctx)
		c.Close()
		if tc.ok && err != nil {
			t.Fatalf("verify_ca %v: %v", tc.verify, err)
		}
		if !tc.ok && (!errors.Is(err, bmc.ErrTLS) || !strings.Contains(bmc.Summary(err), "unknown authority; set driver_info/redfish_verify_ca")) {
			t.Fatalf("verify_ca %v against a self-signed BMC: %v", tc.verify, err)
		}
	}
	info := sim.DriverInfo("1")
	info["redfish_verify_ca"] = "/nonexistent/ca.pem"
	var fe *bmc.FieldError
	if _, err := bmc.Open("redfish", "n1", info, fast); !errors.As(err, &fe) || fe.Field != "driver_info/redfish_verify_ca" {
		t.Fatalf("missing CA bundle: %v", err)
	}
	// The simulator's certificate by path: refused while no CA directory
	// is configured, trusted once its directory is the CA directory.
	info["redfish_verify_ca"] = sim.CA()
	if _, err := bmc.Open("redfish", "n1", info, fast); !errors.As(err, &fe) || fe.Field != "driver_info/redfish_verify_ca" {
		t.Fatalf("CA path without a CA directory: %v", err)
	}
	bmc.SetCADir(sim.Dir)
	defer bmc.SetCADir("")
	c, err := bmc.Open("redfish", "n1", info, fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.PowerState(ctx); err != nil {
		t.Fatalf("CA path under the CA directory: %v", err)
	}
}

func TestRedfishSystemIDOnATwoSystemBMC(t *testing.T) {
	sim := bmctest.StartRedfish(t, "SIM_SYSTEMS=2")
	ctx := context.Background()
	for _, id := range []string{"/redfish/v1/Systems/2", "2"} {
		info := sim.DriverInfo("2")
		info["redfish_system_id"] = id
		c, _ := bmc.Open("redfish", "n2", info, fast)
		if _, err := bmc.Power(ctx, c, bmc.PowerOn, 20*time.Second, 100*time.Millisecond); err != nil {
			t.Fatalf("system id %s: %v", id, err)
		}
		c.Close()
		if sim.Power(t, "2") != "On" || sim.Power(t, "1") != "Off" {
			t.Fatalf("system id %s: system 1 %s, system 2 %s", id, sim.Power(t, "1"), sim.Power(t, "2"))
		}
		_, _ = bmc.Power(ctx, c, bmc.PowerOff, 20*time.Second, 100*time.Millisecond)
	}
	info := sim.DriverInfo("1")
	delete(info, "redfish_system_id")
	c, _ := bmc.Open("redfish", "n", info, fast)
	if _, err := c.PowerState(ctx); !errors.Is(err, bmc.ErrBMC) || !strings.Contains(err.Error(), "redfish_system_id") {
		t.Fatalf("two systems, no id: %v", err)
	}
	info["redfish_system_id"] = "/redfish/v1/Systems/9"
	c, _ = bmc.Open("redfish", "n", info, fast)
	if _, err := c.PowerState(ctx); err == nil || !strings.Contains(err.Error(), "no system /redfish/v1/Systems/9") {
		t.Fatalf("unknown system: %v", err)
	}
}

func TestRedfishResetBMCIsARedfishRestart(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	c, _ := bmc.Open("redfish", "n1", sim.DriverInfo("1"), fast)
	defer c.Close()
	before := len(sim.Bodies(t))
	if err := c.ResetBMC(context.Background()); err != nil {
		t.Fatal(err)
	}
	bodies := strings.Join(sim.Bodies(t)[before:], "\n")
	if !strings.Contains(bodies, "Manager.Reset") || !strings.Contains(bodies, `"GracefulRestart"`) {
		t.Fatalf("BMC reset bodies:\n%s", bodies)
	}
	// Sessions die with the BMC reset; the client logs in again.
	if _, err := c.PowerState(context.Background()); err != nil {
		t.Fatalf("after a BMC reset: %v", err)
	}
}

func TestRedfishAddressForms(t *testing.T) {
	for in, want := range map[string]string{
		"bmc.example.com":                   "https://bmc.example.com",
		"http://10.0.0.1:8000":              "http://10.0.0.1:8000",
		"https://[fd00::1]:8443":            "https://[fd00::1]:8443",
		"fd00::1":                           "https://[fd00::1]",
		"https://proxy/bmc7/redfish/v1/":    "https://proxy/bmc7",
		"https://10.0.0.1:8443/prefix/path": "https://10.0.0.1:8443/prefix/path",
	} {
		u, err := bmc.ParseRedfishAddress(in)
		if err != nil || u.String() != want {
			t.Errorf("%s: %v, %v; want %s", in, u, err, want)
		}
	}
	for _, bad := range []string{"ftp://x", "https://", "https://u:p@h", "https://h:99999"} {
		if err := bmc.Validate("redfish", map[string]any{"redfish_address": bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	for k, v := range map[string]any{"redfish_auth_type": "token", "redfish_verify_ca": "maybe"} {
		err := bmc.Validate("redfish", map[string]any{"redfish_address": "h", k: v})
		var fe *bmc.FieldError
		if !errors.As(err, &fe) || fe.Field != "driver_info/"+k {
			t.Errorf("%s=%v: %v", k, v, err)
		}
	}
	for k, v := range map[string]any{"ipmi_protocol_version": "3.0", "ipmi_priv_level": "ROOT"} {
		if err := bmc.Validate("ipmi", map[string]any{"ipmi_address": "h", k: v}); err == nil {
			t.Errorf("%s=%v accepted", k, v)
		}
	}
}

func TestUnreachableSummaryHidesTheAddress(t *testing.T) {
	info := map[string]any{"redfish_address": "https://127.0.0.1:1", "redfish_username": "u", "redfish_password": "p"}
	c, _ := bmc.Open("redfish", "n", info, bmc.Options{Timeout: 2 * time.Second, Retries: -1})
	_, err := c.PowerState(context.Background())
	if !errors.Is(err, bmc.ErrUnreachable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("dead BMC: %v", err)
	}
	if s := bmc.Summary(err); s != "the BMC did not answer (unreachable) after 1 try of 2 s each" {
		t.Fatalf("summary %q", s)
	}
}

func TestBMCNetworkAllowList(t *testing.T) {
	sim := bmctest.SharedRedfish(t)
	nets, err := bmc.ParseNetworks([]string{"10.0.0.0/8", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bmc.ParseNetworks([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("bad CIDR accepted")
	}
	bmc.SetNetworks(nets)
	defer bmc.SetNetworks(nil)
	var fe *bmc.FieldError
	if err := bmc.Validate("redfish", sim.DriverInfo("1")); !errors.As(err, &fe) || fe.Field != "driver_info/redfish_address" {
		t.Fatalf("loopback redfish address outside the allow-list: %v", err)
	}
	if err := bmc.Validate("ipmi", map[string]any{"ipmi_address": "localhost"}); !errors.As(err, &fe) || fe.Field != "driver_info/ipmi_address" {
		t.Fatalf("a name resolving to loopback: %v", err)
	}
	if err := bmc.Validate("ipmi", map[string]any{"ipmi_address": "10.1.2.3"}); err != nil {
		t.Fatalf("allowed address: %v", err)
	}
	// A node enrolled before the list existed is refused at connect time.
	bmc.SetNetworks(nil)
	c, err := bmc.Open("redfish", "n", sim.DriverInfo("1"), fast)
	if err != nil {
		t.Fatal(err)
	}
	bmc.SetNetworks(nets)
	_, err = c.PowerState(context.Background())
	if !errors.Is(err, bmc.ErrNetwork) || strings.Contains(bmc.Summary(err), "127.0.0.1") {
		t.Fatalf("connect outside the allow-list: %v", err)
	}
	bmc.SetNetworks([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	if _, err := c.PowerState(context.Background()); err != nil {
		t.Fatalf("allowed again: %v", err)
	}
}

func TestIPMIFailuresAreReadable(t *testing.T) {
	sim := bmctest.Start(t)
	ctx := context.Background()
	bad, _ := bmc.Open("ipmi", "n2", sim.DriverInfo("wrong-secret-123"), bmc.Options{Timeout: 5 * time.Second})
	_, err := bad.PowerState(ctx)
	if !errors.Is(err, bmc.ErrAuth) || strings.Contains(err.Error(), "wrong-secret-123") {
		t.Fatalf("wrong password: %v", err)
	}
	info := sim.DriverInfo(bmctest.Password)
	info["ipmi_port"] = float64(1) // nothing listens there
	dead, _ := bmc.Open("ipmi", "n3", info, bmc.Options{Timeout: 3 * time.Second, Retries: -1})
	_, err = dead.PowerState(ctx)
	if !errors.Is(err, bmc.ErrUnreachable) || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), bmctest.Password) {
		t.Fatalf("dead BMC: %v", err)
	}
}

func TestIPMIKeysReachIpmitool(t *testing.T) {
	sim := bmctest.Start(t)
	ctx := context.Background()
	for _, v := range []map[string]any{
		{"ipmi_priv_level": "OPERATOR", "ipmi_protocol_version": "2.0"},
		{"ipmi_priv_level": "ADMINISTRATOR", "ipmi_protocol_version": "1.5"},
	} {
		info := sim.DriverInfo(bmctest.Password)
		for k, x := range v {
			info[k] = x
		}
		c, _ := bmc.Open("ipmi", "n", info, fast)
		if err := c.SetBootDevice(ctx, "cdrom", false, ""); err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		if sim.Boot() != "cdrom" {
			t.Fatalf("%v: simulator boot device %q", v, sim.Boot())
		}
		if err := c.SetBootDevice(ctx, "pxe", false, ""); err != nil || sim.Boot() != "pxe" {
			t.Fatalf("%v: %v, boot %s", v, err, sim.Boot())
		}
		if b, err := c.BootDevice(ctx); err != nil || b.Device != "pxe" || b.Persistent == nil || *b.Persistent {
			t.Fatalf("%v: read back %+v, %v", v, b, err)
		}
	}
}

func TestFakeDriver(t *testing.T) {
	ctx := context.Background()
	c, err := bmc.Open("fake", "f1", nil, bmc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bmc.Power(ctx, c, bmc.PowerOn, time.Second, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	again, _ := bmc.Open("fake", "f1", nil, bmc.Options{})
	if st, _ := again.PowerState(ctx); st != bmc.PowerOn {
		t.Fatalf("fake BMC forgot its power state: %s", st)
	}
	// Its node deleted, the BMC goes; the UUID enrolled again starts off.
	bmc.ForgetFake("f1")
	fresh, _ := bmc.Open("fake", "f1", nil, bmc.Options{})
	if st, _ := fresh.PowerState(ctx); st != bmc.PowerOff {
		t.Fatalf("a forgotten fake BMC kept its power state: %s", st)
	}
	if _, err := bmc.Open("ipmi", "x", map[string]any{}, bmc.Options{}); err == nil {
		t.Fatal("ipmi without an address opened")
	}
}
