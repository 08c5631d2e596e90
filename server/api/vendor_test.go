package api_test

import (
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestVendorPassthru: no driver has vendor methods; calling one is
// Ironic's 400, on nodes and drivers alike.
func TestVendorPassthru(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		mustStatus(t, c.Do(t, "POST", "/v1/nodes", map[string]any{"name": "vp", "driver": "fake"}), 201)
		for _, path := range []string{"/v1/nodes/vp/vendor_passthru/methods", "/v1/drivers/ipmi/vendor_passthru/methods"} {
			r := c.Do(t, "GET", path, nil)
			mustStatus(t, r, 200)
			if len(r.JSON(t)) != 0 {
				t.Errorf("%s: %s", path, r.Body)
			}
		}
		for _, path := range []string{"/v1/nodes/vp/vendor_passthru", "/v1/drivers/ipmi/vendor_passthru"} {
			mustFault(t, c.Do(t, "POST", path+"?method=gophercloud_acceptance_missing_method", map[string]any{"noop": true}), 400, "No handler for method gophercloud_acceptance_missing_method")
			mustFault(t, c.Do(t, "GET", path, nil), 400, "Method not specified")
		}
		mustStatus(t, c.Do(t, "GET", "/v1/nodes/nope/vendor_passthru/methods", nil), 404)
		mustStatus(t, c.Do(t, "GET", "/v1/drivers/nope/vendor_passthru/methods", nil), 404)
	})
}
