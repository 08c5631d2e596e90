package api_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestInvalidTextIsA400: a NUL (\u0000) or bytes that are not UTF-8, in
// a value or a key at any depth of any resource's JSON body, are a 400
// naming the field on both databases, and nothing is written;
// PostgreSQL answered a NUL with a 500.
func TestInvalidTextIsA400(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := clients["system-admin"]
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "text-1", "driver": "fake-hardware", "owner": "own"})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		count := func(path, key string) int {
			l, _ := admin.Do(t, "GET", path, nil).JSON(t)[key].([]any)
			return len(l)
		}
		collections := map[string]string{"/v1/nodes": "nodes", "/v1/chassis": "chassis", "/v1/ports": "ports",
			"/v1/allocations": "allocations", "/v1/runbooks": "runbooks", "/v1/deploy_templates": "deploy_templates",
			"/v1/inspection_rules": "inspection_rules"}
		before := map[string]int{}
		for p, k := range collections {
			before[p] = count(p, k)
		}
		for _, tc := range []struct {
			who, method, path, body, field string
		}{
			{"system-admin", "POST", "/v1/nodes", `{"driver":"fake-hardware","extra":{"foo":"a\u0000b"}}`, "extra.foo"},
			{"system-admin", "POST", "/v1/nodes", `{"driver":"fake-hardware","description":"x\u0000"}`, "description"},
			{"system-admin", "POST", "/v1/nodes", "{\"driver\":\"fake-hardware\",\"description\":\"\xff\xfe\"}", "description"},
			{"system-admin", "POST", "/v1/nodes", `{"driver":"fake-hardware","extra":{"k\u0000":"v"}}`, `extra.k\x00`},
			{"system-admin", "POST", "/v1/chassis", `{"description":"rack \u0000"}`, "description"},
			{"system-admin", "POST", "/v1/ports", fmt.Sprintf(`{"node_uuid":%q,"address":"52:54:00:aa:bb:01","extra":{"a":["ok","\u0000"]}}`, id), "extra.a[1]"},
			{"system-admin", "POST", "/v1/allocations", `{"resource_class":"baremetal","extra":{"a":{"b":"\u0000"}}}`, "extra.a.b"},
			{"system-admin", "POST", "/v1/runbooks", `{"name":"CUSTOM_NUL","steps":[{"interface":"power","step":"power_on","args":{},"order":1}],"extra":{"x":"\u0000"}}`, "extra.x"},
			{"system-admin", "POST", "/v1/deploy_templates", `{"name":"CUSTOM_NUL","steps":[{"interface":"bios","step":"apply_configuration","args":{"settings":[{"name":"a","value":"\u0000"}]},"priority":10}]}`, "steps[0].args.settings[0].value"},
			{"system-admin", "POST", "/v1/inspection_rules", `{"description":"\u0000","actions":[{"op":"set-attribute","args":{"path":"/extra/a","value":"b"}}]}`, "description"},
			{"owner-member", "PATCH", "/v1/nodes/" + id, `[{"op":"add","path":"/extra/foo","value":"x\u0000"}]`, "extra.foo"},
			{"owner-member", "PATCH", "/v1/nodes/" + id, `[{"op":"replace","path":"/description","value":"\u0000"}]`, "description"},
			{"owner-member", "PATCH", "/v1/nodes/" + id, "[{\"op\":\"add\",\"path\":\"/driver_info/k\",\"value\":\"\xc3\x28\"}]", "driver_info.k"},
		} {
			got := clients[tc.who].Do(t, tc.method, tc.path, tc.body)
			if got.Status != 400 || !strings.Contains(got.Fault(t), tc.field+" ") {
				t.Errorf("%s %s %s: %d %s, want a 400 naming %s", tc.method, tc.path, tc.body, got.Status, got.Body, tc.field)
			}
		}
		for p, k := range collections {
			if n := count(p, k); n != before[p] {
				t.Errorf("%s holds %d, had %d: a refused request wrote", p, n, before[p])
			}
		}
		n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if len(n["extra"].(map[string]any)) != 0 || n["description"] != nil || len(n["driver_info"].(map[string]any)) != 0 {
			t.Errorf("a refused patch wrote: %v %v %v", n["extra"], n["description"], n["driver_info"])
		}
		if r := admin.Do(t, "GET", "/v1/nodes?owner=a%00b", nil); r.Status != 400 {
			t.Errorf("a NUL in a query: %d %s", r.Status, r.Body)
		}
	})
}

// hostileSecret is the Redfish node's password: no answer may hold it.
const hostileSecret = "Hostile-Redfish-Secret-91"

// TestHostileDriverInfo walks every driver_info and instance_info key
// Anvil reads, for every driver, as a real owner-project member under the
// default policy, setting each to values meant to hurt: files on the
// conductor host (devices, secrets, a FIFO, a 2 GiB sparse file), an
// oversized string, NULs, URLs with credentials and addresses outside
// --bmc-networks. Whether the PATCH is accepted or refused, a power
// action, validate and reads follow; nothing may be a 500, the server
// keeps answering, no answer holds a BMC password or any of those files,
// and a path is refused to the member without saying whether it exists.
// A system admin may name a CA bundle under --bmc-ca-dir, which the
// connection then trusts; outside it, a FIFO or a file over 1 MiB are
// refused.
func TestHostileDriverInfo(t *testing.T) {
	redfishSim := bmctest.SharedRedfish(t)
	ipmiSim := bmctest.Start(t)
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		caDir, elsewhere := t.TempDir(), t.TempDir()
		goodCA := filepath.Join(caDir, "bmc.pem")
		mustNil(t, os.WriteFile(goodCA, []byte(redfishSim.CAPEM), 0o600))
		fifoIn, fifoOut := filepath.Join(caDir, "fifo.pem"), filepath.Join(elsewhere, "fifo")
		mustNil(t, syscall.Mkfifo(fifoIn, 0o600))
		mustNil(t, syscall.Mkfifo(fifoOut, 0o600))
		sparseIn, sparseOut := filepath.Join(caDir, "sparse.pem"), filepath.Join(elsewhere, "sparse")
		for _, p := range []string{sparseIn, sparseOut} {
			mustNil(t, os.WriteFile(p, []byte(redfishSim.CAPEM), 0o600))
			mustNil(t, os.Truncate(p, 2<<30))
		}
		shadowLink := filepath.Join(caDir, "shadow.pem")
		mustNil(t, os.Symlink("/etc/shadow", shadowLink))

		o := bmcOpts
		o.Conductor.BMC = bmc.Options{Timeout: 2 * time.Second, Retries: -1, PowerPoll: 100 * time.Millisecond}
		o.Conductor.PowerTimeout = 5 * time.Second
		o.Conductor.BMCNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
		o.Conductor.BMCCADir = caDir
		srv, clients := startLocal(t, setting, o)
		t.Cleanup(func() { bmc.SetNetworks(nil); bmc.SetCADir("") })
		admin, member, lessee := clients["system-admin"], clients["owner-member"], clients["lessee-reader"]

		redfishInfo := redfishSim.DriverInfo("1")
		redfishInfo["redfish_password"] = hostileSecret
		baseline := map[string]map[string]any{
			"redfish":       redfishInfo,
			"ipmi":          ipmiSim.DriverInfo(bmctest.Password),
			"fake-hardware": {},
		}
		ids := map[string]string{}
		for drv, info := range baseline {
			r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "hostile-" + drv, "driver": drv, "owner": "own", "lessee": "les",
				"driver_info": info, "instance_info": map[string]any{"boot_iso": "http://127.0.0.1/boot.iso", "image_source": "http://127.0.0.1/img"}})
			mustStatus(t, r, 201)
			ids[drv] = r.JSON(t)["uuid"].(string)
		}

		// What must never appear in an answer: the BMC passwords, and
		// what the files hold.
		secrets := []string{hostileSecret, bmctest.Password, "root:", "PATH=" + os.Getenv("PATH")}
		if env, err := os.ReadFile("/proc/self/environ"); err == nil {
			for _, kv := range strings.Split(string(env), "\x00") {
				if _, v, _ := strings.Cut(kv, "="); len(v) >= 12 {
					secrets = append(secrets, kv)
				}
			}
		}
		clean := func(what string, r *servertest.Response) {
			t.Helper()
			if r.Status >= 500 {
				t.Errorf("%s: %d %s", what, r.Status, r.Body)
			}
			for _, s := range secrets {
				if strings.Contains(string(r.Body), s) {
					t.Errorf("%s: the answer holds %.30q", what, s)
				}
			}
		}

		paths := []string{"/dev/zero", "/proc/self/environ", "/etc/shadow", fifoOut, sparseOut, fifoIn, sparseIn, goodCA, shadowLink}
		values := append([]any{strings.Repeat("A", 1<<20-4096), "a\u0000b", "\u0000",
			"http://user:pw@127.0.0.1/x?token=abc", "https://user:pw@127.0.0.1:1/x?token=abc",
			"192.0.2.1", "10.0.0.1", "https://192.0.2.1", "http://10.0.0.1:8000"}, toAny(paths)...)
		keys := map[string][]string{
			"redfish": {"redfish_address", "redfish_system_id", "redfish_username", "redfish_password", "redfish_verify_ca", "redfish_auth_type"},
			"ipmi":    {"ipmi_address", "ipmi_port", "ipmi_username", "ipmi_password", "ipmi_cipher_suite", "ipmi_protocol_version", "ipmi_priv_level"},
			// fake-hardware reads none; a key another driver reads as a
			// file is stored as given and must stay unread.
			"fake-hardware": {"redfish_verify_ca", "ipmi_address"},
		}
		instanceKeys := []string{"boot_iso", "image_source", "capabilities"}

		var pathRefusal string
		// The walk must reach the conductor, not only bounce off PATCH.
		accepted, powered := 0, 0
		for drv, id := range ids {
			fields := map[string][]string{"driver_info": keys[drv]}
			if drv == "redfish" {
				// Read the same way whatever the driver.
				fields["instance_info"] = instanceKeys
			}
			for field, ks := range fields {
				for _, k := range ks {
					for _, v := range values {
						what := fmt.Sprintf("%s %s/%s=%.40q", drv, field, k, v)
						p := member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/" + field + "/" + k, "value": v}})
						clean("PATCH "+what, p)
						s, isString := v.(string)
						if field == "driver_info" && k == "redfish_verify_ca" && drv == "redfish" && isString && strings.HasPrefix(s, "/") {
							if p.Status != 400 || !strings.Contains(p.Fault(t), "driver_info/redfish_verify_ca") {
								t.Errorf("PATCH %s by a project member: %d %s, want a 400 naming driver_info/redfish_verify_ca", what, p.Status, p.Body)
							} else if pathRefusal == "" {
								pathRefusal = p.Fault(t)
							} else if p.Fault(t) != pathRefusal {
								t.Errorf("PATCH %s: the refusal %q differs from another path's %q: it tells files apart", what, p.Fault(t), pathRefusal)
							}
						}
						if field == "driver_info" && strings.HasSuffix(k, "_address") && drv != "fake-hardware" && isString &&
							(strings.Contains(s, "192.0.2.1") || strings.Contains(s, "10.0.0.1")) && p.Status != 400 {
							t.Errorf("PATCH %s: %d, want a 400 outside --bmc-networks", what, p.Status)
						}
						if p.Status < 300 {
							accepted++
						}
						if exercise(t, what, clean, member, lessee, id) {
							powered++
						}
						if r := srv.Client().Do(t, "GET", "/healthz", nil); r.Status != 200 {
							t.Fatalf("after %s the server does not answer: %d", what, r.Status)
						}
						if p.Status < 300 {
							restore(t, admin, id, field, baseline[drv])
						}
						// Refused credentials may have put the node in
						// maintenance, where power actions stop short.
						if r := admin.Do(t, "DELETE", "/v1/nodes/"+id+"/maintenance", nil); r.Status >= 300 {
							t.Fatalf("maintenance off: %d %s", r.Status, r.Body)
						}
					}
				}
			}
			for _, c := range []*servertest.Client{member, lessee} {
				clean(drv+" history", c.Do(t, "GET", "/v1/nodes/"+id+"/history", nil))
			}
		}

		if accepted == 0 || powered == 0 {
			t.Fatalf("%d hostile values accepted, %d power actions run: the walk tested nothing past PATCH", accepted, powered)
		}
		t.Logf("%d hostile values accepted, %d power actions run", accepted, powered)

		// The operator's own rows: a bundle under --bmc-ca-dir is read
		// and trusted; outside it, a FIFO or over 1 MiB is refused.
		rf := ids["redfish"]
		mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+rf, []map[string]any{
			{"op": "replace", "path": "/driver_info/redfish_password", "value": bmctest.RedfishPassword}}), 200)
		for _, tc := range []struct {
			path string
			ok   bool
		}{{goodCA, true}, {redfishSim.CA(), false}, {fifoIn, false}, {sparseIn, false}, {shadowLink, false}, {"/dev/zero", false}} {
			p := admin.Do(t, "PATCH", "/v1/nodes/"+rf, []map[string]any{{"op": "add", "path": "/driver_info/redfish_verify_ca", "value": tc.path}})
			if tc.ok {
				mustStatus(t, p, 200)
				continue
			}
			if p.Status != 400 || !strings.Contains(p.Fault(t), "driver_info/redfish_verify_ca") {
				t.Errorf("system admin sets redfish_verify_ca=%s: %d %s, want a 400", tc.path, p.Status, p.Body)
			}
		}
		n := admin.Do(t, "GET", "/v1/nodes/"+rf, nil).JSON(t)
		if n["driver_info"].(map[string]any)["redfish_verify_ca"] != goodCA {
			t.Fatalf("the accepted CA path is not stored: %v", n["driver_info"])
		}
		for _, target := range []string{"power off", "power on"} {
			mustStatus(t, admin.Do(t, "PUT", "/v1/nodes/"+rf+"/states/power", map[string]any{"target": target}), 202)
			n = waitPower(t, admin, rf)
			if n["power_state"] != target || n["last_error"] != nil {
				t.Fatalf("%s over TLS trusting %s: %v, last_error %v", target, goodCA, n["power_state"], n["last_error"])
			}
		}
	})
}

// exercise asks for a power action, validation and the node, as the
// owner member and the lessee reader, checking each answer; it reports
// whether the power action was taken.
func exercise(t *testing.T, what string, clean func(string, *servertest.Response), member, lessee *servertest.Client, id string) bool {
	t.Helper()
	pw := member.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"})
	clean("power "+what, pw)
	if pw.Status == 202 {
		waitPower(t, member, id)
	}
	for _, c := range []*servertest.Client{member, lessee} {
		clean("validate "+what, c.Do(t, "GET", "/v1/nodes/"+id+"/validate", nil))
		clean("GET "+what, c.Do(t, "GET", "/v1/nodes/"+id, nil))
	}
	return pw.Status == 202
}

// restore puts the node's field back as enrolled, and out of the
// maintenance repeated failures may have put it in.
func restore(t *testing.T, admin *servertest.Client, id, field string, info map[string]any) {
	t.Helper()
	v := any(info)
	if field == "instance_info" {
		v = map[string]any{"boot_iso": "http://127.0.0.1/boot.iso", "image_source": "http://127.0.0.1/img"}
	}
	mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "replace", "path": "/" + field, "value": v}}), 200)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
