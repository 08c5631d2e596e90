package bmc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
)

func TestIPMIAgainstSimulator(t *testing.T) {
	sim := bmctest.Start(t)
	ctx := context.Background()
	c, err := bmc.Open("ipmi", "n1", sim.DriverInfo(bmctest.Password), bmc.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st, err := c.PowerState(ctx); err != nil || st != bmc.PowerOff {
		t.Fatalf("initial power %q, %v", st, err)
	}
	if err := c.SetPower(ctx, bmc.PowerOn); err != nil {
		t.Fatal(err)
	}
	if sim.Power() != "1" {
		t.Fatalf("simulator power %s after power on", sim.Power())
	}
	if st, _ := c.PowerState(ctx); st != bmc.PowerOn {
		t.Fatalf("power state %q after power on", st)
	}
	if err := c.SetBootDevice(ctx, "pxe", false); err != nil {
		t.Fatal(err)
	}
	if sim.Boot() != "pxe" {
		t.Fatalf("simulator boot device %q", sim.Boot())
	}
	if err := c.SetPower(ctx, bmc.Rebooting); err != nil {
		t.Fatal(err)
	}
	ev := strings.Join(sim.Events(), ",")
	if !strings.HasSuffix(ev, "power 0,power 1") || sim.Power() != "1" {
		t.Fatalf("reboot events %s, power %s", ev, sim.Power())
	}
	if err := c.SetPower(ctx, bmc.PowerOff); err != nil || sim.Power() != "0" {
		t.Fatalf("power off: %v, simulator %s", err, sim.Power())
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

func TestFakeDriver(t *testing.T) {
	ctx := context.Background()
	c, err := bmc.Open("fake", "f1", nil, bmc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetPower(ctx, bmc.PowerOn); err != nil {
		t.Fatal(err)
	}
	again, _ := bmc.Open("fake", "f1", nil, bmc.Options{})
	if st, _ := again.PowerState(ctx); st != bmc.PowerOn {
		t.Fatalf("fake BMC forgot its power state: %s", st)
	}
	if _, err := bmc.Open("ipmi", "x", map[string]any{}, bmc.Options{}); err == nil {
		t.Fatal("ipmi without an address opened")
	}
}
