package api_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// anvilURL is the base URL the tests' firmware image store gives.
const anvilURL = "http://anvil.test:6385"

// bmclibFwOpts: BMC addresses only on loopback, the image store at
// anvilURL, a BMC away mid-flash waited out for 20 s.
func bmclibFwOpts() server.Options {
	o := fwOpts(20 * time.Second)
	o.FirmwareURL = anvilURL
	o.Conductor.BMCNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	return o
}

// storeImage uploads image to Anvil's firmware image store and returns
// the URL the store gives for it.
func storeImage(t *testing.T, admin *servertest.Client, name string, image []byte) string {
	t.Helper()
	r := upload(t, admin, "?name="+name, bytes.NewReader(image), "")
	mustStatus(t, r, 201)
	return r.JSON(t)["url"].(string)
}

// enrolVendor enrols a bmclib node for the fake and makes it manageable.
func enrolVendor(t *testing.T, admin *servertest.Client, f *bmctest.VendorBMC) string {
	t.Helper()
	r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"driver": "bmclib", "driver_info": f.DriverInfo()})
	mustStatus(t, r, 201)
	id := r.JSON(t)["uuid"].(string)
	provision(t, admin, id, map[string]any{"target": "manage"}, 202)
	if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
		t.Fatalf("manage: %v", n["last_error"])
	}
	return id
}

func fwStep(settings ...map[string]any) map[string]any {
	list := make([]any, len(settings))
	for i, s := range settings {
		list[i] = s
	}
	return step("firmware", "update", map[string]any{"settings": list})
}

// TestBmclibFirmwareVendors pushes an image from Anvil's store through
// each vendor provider's flow against its recorded-exchange fake: the
// fake receives exactly the stored bytes for the component and the
// install call bmclib's provider makes, the versions before and after go
// to the node's firmware and history. Dell's BIOS job waits Scheduled
// until the host is power cycled, which the step does; OpenBMC's BMC
// stops answering for a few polls mid-flash, which the step rides out,
// and its BIOS flow has the host powered off before the upload;
// ASRockRack's BMC is reset after its install, as bmclib's steps say.
func TestBmclibFirmwareVendors(t *testing.T) {
	for _, tc := range []struct {
		vendor, component string
		set               func(*bmctest.VendorBMC)
		calls             string
	}{
		{"dell", "bios", func(f *bmctest.VendorBMC) { f.PowerCycle = true }, "upload BIOS,install BIOS,power-cycle"},
		{"supermicro", "bmc", nil, "upload BMC,install BMC"},
		{"openbmc", "bmc", func(f *bmctest.VendorBMC) { f.AwayPolls = 3 }, "upload BMC,install BMC,dropped,dropped,dropped"},
		// bmclib's OpenBMC BIOS flow powers the host off before the upload.
		{"openbmc-bios", "bios", func(f *bmctest.VendorBMC) { f.PowerOn() }, "power-off,upload BIOS,install BIOS"},
		{"asrockrack", "bmc", nil, "flash-mode,upload BMC,install BMC,reset-bmc"},
	} {
		t.Run(tc.vendor, func(t *testing.T) {
			vendor, _, _ := strings.Cut(tc.vendor, "-")
			storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
				fake := bmctest.StartVendorBMC(t, vendor)
				if tc.set != nil {
					tc.set(fake)
				}
				_, clients := startLocal(t, setting, bmclibFwOpts())
				admin := atVer(clients["system-admin"], api.VerFirmwareIface)
				image := []byte(strings.ToUpper(tc.component) + " image for " + tc.vendor + "\x00\x01\x02 binary tail")
				url := storeImage(t, admin, tc.component+"-"+tc.vendor+".bin", image)
				id := enrolVendor(t, admin, fake)
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("requests: %v\ncalls: %v\n%s", fake.Requests(), fake.Calls(), eventsOf(t, admin, id))
					}
				})

				r := admin.Do(t, "GET", "/v1/nodes/"+id+"/steps", nil)
				mustStatus(t, r, 200)
				if !strings.Contains(string(r.Body), `"update"`) {
					t.Fatalf("%s step list lacks firmware.update: %s", tc.vendor, r.Body)
				}
				provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(fwStep(map[string]any{"component": tc.component, "url": url}))}, 202)
				n := waitState(t, admin, id, "manageable")
				if n["last_error"] != nil {
					t.Fatalf("firmware.update: %v\nrequests: %v", n["last_error"], fake.Requests())
				}
				ups := fake.Uploads()
				if len(ups) != 1 || !bytes.Equal(ups[0].Bytes, image) || ups[0].Component != strings.ToUpper(tc.component) {
					t.Fatalf("the fake received %d uploads %+v, want the stored image once for %s", len(ups), ups, tc.component)
				}
				var calls []string
				for _, c := range fake.Calls() {
					if !slices.Contains([]string{"power-off", "power-cycle", "reset-bmc", "dropped"}, c) || strings.Contains(tc.calls, c) {
						calls = append(calls, c)
					}
				}
				if got := strings.Join(calls, ","); !sameMultiset(got, tc.calls) || strings.HasPrefix(tc.calls, "power-off,") != strings.HasPrefix(got, "power-off,") {
					t.Errorf("%s calls %s, want %s", tc.vendor, got, tc.calls)
				}
				bios, bmcv := fake.Versions()
				now, old := bmcv, "1.00"
				if tc.component == "bios" {
					now, old = bios, "1.0.0"
				}
				if now == old {
					t.Fatalf("the fake's %s still runs %s", tc.component, now)
				}
				if fw := firmwareBy(t, admin, id)[tc.component]; fw["current_version"] != now || fw["last_version_flashed"] != now || fw["initial_version"] != old {
					t.Errorf("%s firmware: %v, want %s flashed over %s", tc.component, fw, now, old)
				}
				if ev := eventsOf(t, admin, id); !strings.Contains(ev, tc.component+" "+old+" -> "+now) {
					t.Errorf("history lacks the %s versions %s -> %s:\n%s", tc.component, old, now, ev)
				}
			})
		})
	}
}

// sameMultiset compares two comma lists ignoring order where the fake's
// record interleaves (a dropped connection and the calls around it).
func sameMultiset(a, b string) bool {
	x, y := strings.Split(a, ","), strings.Split(b, ",")
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// TestBmclibFirmwareFailure: a BMC whose install task fails fails the
// clean with the BMC's own words, and neither the BMC password nor
// anything else secret shows in the error or the history.
func TestBmclibFirmwareFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		fake := bmctest.StartVendorBMC(t, "dell")
		fake.Fail = true
		fake.FailMessage = "Unable to verify the update package signature (user root, password " + bmctest.VendorPassword + ")."
		_, clients := startLocal(t, setting, bmclibFwOpts())
		admin := atVer(clients["system-admin"], api.VerFirmwareIface)
		url := storeImage(t, admin, "bmc-bad.bin", []byte("BMC image that fails"))
		id := enrolVendor(t, admin, fake)
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(fwStep(map[string]any{"component": "bmc", "url": url}))}, 202)
		n := waitState(t, admin, id, "clean failed")
		// The summary names the failure; the step's history detail, for
		// operators, carries the BMC's words, the password masked.
		e, _ := n["last_error"].(string)
		if !strings.Contains(e, "bmc firmware update ended in Exception") {
			t.Errorf("last_error %q, want the failed bmc update", e)
		}
		ev := eventsOf(t, admin, id)
		if !strings.Contains(ev, "Unable to verify the update package signature (user ******, password ******)") {
			t.Errorf("history lacks the BMC's words, masked:\n%s", ev)
		}
		if strings.Contains(e, bmctest.VendorPassword) || strings.Contains(ev, bmctest.VendorPassword) {
			t.Errorf("the BMC password shows: %q\n%s", e, ev)
		}
		if _, bmcv := fake.Versions(); bmcv != "1.00" {
			t.Errorf("the failed update changed the bmc to %s", bmcv)
		}
	})
}

// TestBmclibFirmwareRefusesForeignImages: an image URL not of this
// Anvil's store (another host, a path beside the store, an image never
// uploaded) or a component the provider does not update is refused with
// a 400 naming the field before the run starts; an image deleted after
// the run was accepted fails the step when it comes; and the BMC never
// receives anything.
func TestBmclibFirmwareRefusesForeignImages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		fake := bmctest.StartVendorBMC(t, "asrockrack")
		_, clients := startLocal(t, setting, bmclibFwOpts())
		admin := atVer(clients["system-admin"], api.VerFirmwareIface)
		good := storeImage(t, admin, "bmc.bin", []byte("BMC image"))
		id := enrolVendor(t, admin, fake)
		sum := strings.Split(strings.TrimPrefix(good, anvilURL+"/firmware/"), "/")[0]
		for _, tc := range []struct {
			setting     map[string]any
			field, says string
		}{
			{map[string]any{"component": "bmc", "url": "http://evil.example/firmware/" + sum + "/bmc.bin"}, "clean_steps[0].args.settings[0].url", "not a firmware image of this Anvil"},
			{map[string]any{"component": "bmc", "url": anvilURL + "/firmware/../../etc/passwd"}, "clean_steps[0].args.settings[0].url", "it must be " + anvilURL + "/firmware/"},
			{map[string]any{"component": "bmc", "url": anvilURL + "/firmware/" + strings.Repeat("0", 64) + "/bmc.bin"}, "clean_steps[0].args.settings[0].url", "does not have"},
			{map[string]any{"component": "bios", "url": good}, "clean_steps[0].args.settings[0].component", "updates only bmc"},
		} {
			r := admin.Do(t, "PUT", "/v1/nodes/"+id+"/states/provision", map[string]any{"target": "clean", "clean_steps": steps(fwStep(tc.setting))})
			mustStatus(t, r, 400)
			if b := string(r.Body); !strings.Contains(b, tc.field) || !strings.Contains(b, tc.says) {
				t.Errorf("%v: %s, want %s: %s", tc.setting, b, tc.field, tc.says)
			}
		}
		if n := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t); n["provision_state"] != "manageable" {
			t.Errorf("node in %v after refused cleans", n["provision_state"])
		}

		// An image deleted after the run was accepted fails the step when
		// it comes to it, naming the image, and nothing is pushed.
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("deploy", "hold", nil),
			fwStep(map[string]any{"component": "bmc", "url": good}))}, 202)
		waitState(t, admin, id, "clean hold")
		mustStatus(t, admin.Do(t, "DELETE", "/v1/anvil/firmware-images/"+sum, nil), 204)
		provision(t, admin, id, map[string]any{"target": "unhold"}, 202)
		n := waitState(t, admin, id, "clean failed")
		if e, _ := n["last_error"].(string); !strings.Contains(e, "which this Anvil does not have") || !strings.Contains(e, sum) {
			t.Errorf("deleted image: last_error %q", e)
		}
		if ups := fake.Uploads(); len(ups) != 0 {
			t.Errorf("the BMC received %d uploads", len(ups))
		}
	})
}

// TestBmclibPostCode reads the POST code of an ASRockRack BMC's host
// (its recorded-exchange fake) into the node's history as a diagnostics
// event, and the step is offered only where bmclib's provider reads
// POST codes.
func TestBmclibPostCode(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		fake := bmctest.StartVendorBMC(t, "asrockrack")
		_, clients := startLocal(t, setting, bmclibFwOpts())
		admin := atVer(clients["system-admin"], api.VerMax)
		id := enrolVendor(t, admin, fake)
		provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "get_post_code", nil))}, 202)
		if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
			t.Fatalf("get_post_code: %v", n["last_error"])
		}
		if ev := eventsOf(t, admin, id); !strings.Contains(ev, "diagnostics: POST code 160 (0xA0): grub/os.") {
			t.Errorf("history lacks the POST code:\n%s", ev)
		}
		if !slices.Contains(fake.Requests(), "GET /api/asrr/getbioscode") {
			t.Errorf("the BMC was not asked for its POST code: %v", fake.Requests())
		}

		dell := bmctest.StartVendorBMC(t, "dell")
		other := enrolVendor(t, admin, dell)
		provision(t, admin, other, map[string]any{"target": "clean", "clean_steps": steps(step("management", "get_post_code", nil))}, 202)
		if n := waitState(t, admin, other, "clean failed"); n["last_error"] != "Step management.get_post_code is not supported by driver bmclib with bmclib provider dell." {
			t.Errorf("get_post_code on dell: %v", n["last_error"])
		}
	})
}

// TestBmclibScreenshot takes the console screenshot of a Dell (PNG,
// base64 in iDRAC's JSON) and a Supermicro (JPEG preview over its web
// API) through their recorded-exchange fakes, keeps it as the node's,
// and serves it byte for byte as the image it is to whoever may see the
// node's console, and to nobody else; a BMC whose "screenshot" is not
// the image it claims fails the step and keeps nothing.
func TestBmclibScreenshot(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting, bmclibFwOpts())
		admin := atVer(clients["system-admin"], api.VerMax)
		for _, tc := range []struct {
			vendor, ctype string
			image         []byte
		}{{"dell", "image/png", bmctest.ScreenPNG}, {"supermicro", "image/jpeg", bmctest.ScreenJPEG}} {
			fake := bmctest.StartVendorBMC(t, tc.vendor)
			id := enrolVendor(t, admin, fake)
			mustStatus(t, admin.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{{"op": "add", "path": "/owner", "value": "own"}}), 200)
			mustStatus(t, admin.Do(t, "GET", "/v1/nodes/"+id+"/screenshot", nil), 404)
			provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "screenshot", nil))}, 202)
			if n := waitState(t, admin, id, "manageable"); n["last_error"] != nil {
				t.Fatalf("%s screenshot: %v", tc.vendor, n["last_error"])
			}
			for who, want := range map[string]int{"system-admin": 200, "owner-member": 200, "owner-reader": 403, "system-reader": 403, "anonymous": 401, "other-admin": 404} {
				r := clients[who].Do(t, "GET", "/v1/nodes/"+id+"/screenshot", nil)
				if r.Status != want {
					t.Errorf("%s: %s reads the screenshot with %d, want %d", tc.vendor, who, r.Status, want)
					continue
				}
				if want == 200 && (!bytes.Equal(r.Body, tc.image) || r.Header.Get("Content-Type") != tc.ctype || r.Header.Get("X-Content-Type-Options") != "nosniff") {
					t.Errorf("%s: %s got %d bytes as %s (%s), want the BMC's %d as %s", tc.vendor, who, len(r.Body), r.Header.Get("Content-Type"), r.Header.Get("X-Content-Type-Options"), len(tc.image), tc.ctype)
				}
			}
			if !slices.Contains(fake.Calls(), "screenshot") {
				t.Errorf("%s: the BMC took no screenshot: %v", tc.vendor, fake.Calls())
			}

			fake.Screen = []byte("<html><script>alert(1)</script></html>")
			provision(t, admin, id, map[string]any{"target": "clean", "clean_steps": steps(step("management", "screenshot", nil))}, 202)
			if n := waitState(t, admin, id, "clean failed"); !strings.Contains(fmt.Sprint(n["last_error"]), "not the") {
				t.Errorf("%s: a non-image screenshot: %v", tc.vendor, n["last_error"])
			}
			if r := admin.Do(t, "GET", "/v1/nodes/"+id+"/screenshot", nil); !bytes.Equal(r.Body, tc.image) {
				t.Errorf("%s: the refused capture replaced the screenshot: %q", tc.vendor, r.Body)
			}
		}
	})
}
