package bmctest

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
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

// Send makes a change straight on the simulator, bypassing Anvil, as an
// operator at the BMC's own interface (or the BMC itself) would, and
// returns its status.
func (r *Redfish) Send(t testing.TB, method, path string, body any) int {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own simulator
	req, _ := http.NewRequest(method, r.URL+path, bytes.NewReader(b))
	req.SetBasicAuth(RedfishUser, RedfishPassword)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("redfish-sim %s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
