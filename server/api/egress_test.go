package api_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// imageServerOn serves a 200 for any image on addr (Linux puts all of
// 127.0.0.0/8 on lo), redirecting /moved.raw to redirect, and counts
// every request it gets.
func imageServerOn(t *testing.T, addr, redirect string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path == "/moved.raw" {
			http.Redirect(w, r, redirect, http.StatusFound)
			return
		}
		w.Header().Set("Content-Length", "1048576")
		w.WriteHeader(200)
	}))
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s, &n
}

// TestImageSourceNetworks (#41): a project member's image_source on
// loopback, on a redirect to loopback, or in the BMC networks is refused
// with a 400 naming instance_info.image_source and
// --image-source-networks before the refused server gets a single
// request, and the node stays as it was. With an allow-list of
// 127.0.0.2/32 only that address is fetched from (a redirect out of it
// is refused at the hop); with the default (no list), the BMC networks
// are refused.
func TestImageSourceNetworks(t *testing.T) {
	loop, loopHits := imageServerOn(t, "127.0.0.1", "")
	two, twoHits := imageServerOn(t, "127.0.0.2", loop.URL+"/img.raw")
	three, threeHits := imageServerOn(t, "127.0.0.3", "")
	sim := bmctest.StartRedfish(t)
	for _, c := range []struct {
		name    string
		allow   []netip.Prefix
		bmcNets []netip.Prefix
		src     string
		refused *atomic.Int32
		why     string
	}{
		{"loopback outside the allow-list", []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, nil, loop.URL + "/img.raw", loopHits, "outside the networks images may come from"},
		{"redirect to loopback", []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, nil, two.URL + "/moved.raw", loopHits, "outside the networks images may come from"},
		// The default: the BMC networks, which take in the
		// simulator's 127.0.0.1 too, are refused.
		{"BMC network by default", []netip.Prefix{}, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, three.URL + "/img.raw", threeHits, "in the networks of --bmc-networks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
				o := bmcOpts
				o.Conductor.ImageSourceNetworks = c.allow
				o.Conductor.BMCNetworks = c.bmcNets
				srv, clients := startLocal(t, setting, o)
				t.Cleanup(func() { bmc.SetNetworks(nil) })
				admin, member := clients["system-admin"], clients["owner-member"]
				info := sim.DriverInfo("1")
				info["deploy_iso"] = servertest.ServeISO(t)
				r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "redfish", "driver_info": info, "boot_interface": "redfish-virtual-media", "owner": "own"})
				mustStatus(t, r, 201)
				id := r.JSON(t)["uuid"].(string)
				setState(t, srv, id, "available")
				mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/instance_info",
					"value": map[string]any{"image_source": c.src, "image_os_hash_algo": "sha256", "image_os_hash_value": strings.Repeat("ab", 32), "image_download_source": "local"}}}), 200)
				twoBefore := twoHits.Load()
				f := provision(t, member, id, map[string]any{"target": "active"}, 400).Fault(t)
				for _, s := range []string{"instance_info.image_source", "--image-source-networks", c.why} {
					if !strings.Contains(f, s) {
						t.Errorf("fault %q does not say %q", f, s)
					}
				}
				if n := c.refused.Load(); n != 0 {
					t.Errorf("the refused image server saw %d requests", n)
				}
				if n, want := twoHits.Load()-twoBefore, int32(strings.Count(c.src, two.URL)); n != want {
					t.Errorf("the allowed server saw %d requests, want %d", n, want)
				}
				if n := member.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "available" || n["last_error"] != nil {
					t.Errorf("a refused deploy changed the node: %v, %v", n["provision_state"], n["last_error"])
				}
			})
		})
	}
	// The allow-list's own address is fetched from: the refusals above
	// are the policy's, not a server that cannot be reached.
	if twoHits.Load() == 0 {
		t.Error("the allowed image server was never asked")
	}
}
