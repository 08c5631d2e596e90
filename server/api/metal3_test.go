package api_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// metal3Baseline is the microversion metal3's baremetal-operator sends on
// every request and requires as the server's maximum
// (pkg/provisioner/ironic/clients/features.go, baseline = 89).
const metal3Baseline api.Version = 89

// TestMetal3Readiness sends the baremetal-operator's first requests as it
// does (TryInit in pkg/provisioner/ironic/dependencies.go): version
// discovery on its /v1/ endpoint with its baseline microversion, then
// checks the maximum is at least the baseline and the minimum parses;
// then the conductor check, a driver list, ready when it lists any driver.
func TestMetal3Readiness(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, c := start(t, setting)
		c.Version = metal3Baseline.String()
		r := c.Do(t, "GET", "/v1/", nil)
		if api.VerMax < metal3Baseline {
			// Until the ladder reaches the baseline the operator is turned
			// away at this first request, and says so in its log.
			mustStatus(t, r, 406)
			t.Skipf("metal3's baremetal-operator requires API %s; Anvil's VerMax is %s", metal3Baseline, api.VerMax)
		}
		mustStatus(t, r, 200)
		v, _ := r.JSON(t)["version"].(map[string]any)
		maxMinor, okMax := minor(v["version"])
		_, okMin := minor(v["min_version"])
		if !okMax || !okMin || maxMinor < int(metal3Baseline) {
			t.Fatalf("version document %v: want min_version and version 1.N with N >= %d", v, metal3Baseline)
		}
		r = c.Do(t, "GET", "/v1/drivers", nil)
		mustStatus(t, r, 200)
		if ds, _ := r.JSON(t)["drivers"].([]any); len(ds) == 0 {
			t.Fatalf("no drivers listed, so the operator waits for a conductor: %s", r.Body)
		}
	})
}

func minor(v any) (int, bool) {
	s, _ := v.(string)
	m, ok := strings.CutPrefix(s, "1.")
	n, err := strconv.Atoi(m)
	return n, ok && err == nil
}
