package bmc

import (
	"context"
	"testing"
)

// The power sync reads every fake node's power state; a node nothing
// else touched keeps no fake BMC, and clients made before another's
// change still see that change and make theirs to the same machine.
func TestFakeKeptOnlyOnceUsed(t *testing.T) {
	ctx := context.Background()
	const id = "fake-kept"
	t.Cleanup(func() { ForgetFake(id) })
	a, b := fakeFor(id), fakeFor(id)
	if st, err := a.PowerState(ctx); err != nil || st != PowerOff {
		t.Fatalf("a new fake reads %q, %v; want %q", st, err, PowerOff)
	}
	if _, ok := fakes.Load(id); ok {
		t.Fatal("reading a fake's power state kept it")
	}
	if err := b.SetPower(ctx, PowerOn); err != nil {
		t.Fatal(err)
	}
	if _, ok := fakes.Load(id); !ok {
		t.Fatal("a fake powered on was not kept")
	}
	if st, _ := a.PowerState(ctx); st != PowerOn {
		t.Fatalf("a client made before another powered the node on reads %q", st)
	}
	if err := a.SetBootDevice(ctx, "pxe", true, ""); err != nil {
		t.Fatal(err)
	}
	if bd, err := b.BootDevice(ctx); err != nil || bd.Device != "pxe" {
		t.Fatalf("one client's boot device is not the other's: %+v, %v", bd, err)
	}
	ForgetFake(id)
	if st, _ := fakeFor(id).PowerState(ctx); st != PowerOff {
		t.Fatalf("a forgotten fake reads %q", st)
	}
}
