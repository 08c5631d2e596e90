package bmctest

import (
	"fmt"
	"testing"
)

// BIOS is system id's current BIOS attributes and those staged for the
// next reset that differ from them, as the simulator reports them (its
// Settings resource holds every attribute).
func (r *Redfish) BIOS(t testing.TB, id string) (current, pending map[string]any) {
	t.Helper()
	current, _ = r.get(t, r.SystemPath(id)+"/BIOS")["Attributes"].(map[string]any)
	staged, _ := r.get(t, r.SystemPath(id)+"/BIOS/Settings")["Attributes"].(map[string]any)
	pending = map[string]any{}
	for k, v := range staged {
		if fmt.Sprint(current[k]) != fmt.Sprint(v) {
			pending[k] = v
		}
	}
	return current, pending
}

// Resource reads any resource straight from the simulator.
func (r *Redfish) Resource(t testing.TB, path string) map[string]any {
	t.Helper()
	return r.get(t, path)
}
