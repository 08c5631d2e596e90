package bmc

import (
	"slices"
	"testing"
)

// TestBmclibSoftPower: soft power off and soft reboot only for the
// providers whose bmclib PowerSet takes "soft"; Intel AMT's and Home
// Assistant's refuse it, so Anvil does before the conductor acts.
func TestBmclibSoftPower(t *testing.T) {
	for _, p := range BmclibProviders() {
		soft := p != "intelamt" && p != "homeassistant"
		got := PowerTargetsOf("bmclib", map[string]any{"bmclib_provider": p})
		for _, target := range PowerTargets {
			want := soft || target != SoftPowerOff && target != SoftRebooting
			if slices.Contains(got, target) != want {
				t.Errorf("%s %s: %v, want %v", p, target, !want, want)
			}
		}
	}
}
