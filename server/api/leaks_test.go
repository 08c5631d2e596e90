package api_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/api"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/servertest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var portalCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// portalAs signs persona in to the portal as a person would and returns
// a getter of its pages.
func portalAs(t *testing.T, srv *servertest.Server, persona string) func(path string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Accept", "text/html")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("portal %s as %s: %d", path, persona, resp.StatusCode)
		}
		return string(b)
	}
	m := portalCSRF.FindStringSubmatch(get("/login"))
	if m == nil {
		t.Fatal("no CSRF token on the sign-in page")
	}
	resp, err := c.PostForm(srv.URL+"/login", url.Values{"csrf": {m[1]}, "username": {persona}, "password": {"password-" + persona}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 303 {
		t.Fatalf("sign in %s: %d", persona, resp.StatusCode)
	}
	return get
}

// hostile is a service inside the network that answers every request
// with status and body, as an internal host behind a BMC address would.
func hostile(t *testing.T, status int, body string) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// TestBMCFailuresShowOnlyTheirClass: an owner member points a node's BMC
// address at hosts of the internal network (services answering 404, 500
// or 403 with their own text, a Redfish-shaped error, a closed port, TLS
// that fails either way) and asks for a power action. What the member,
// the node's lessee and the portal then read says the class of failure in
// Anvil's words, never what the host answered nor where it is; the system
// admin's history still has the raw answer.
func TestBMCFailuresShowOnlyTheirClass(t *testing.T) {
	const body, message = "INTERNAL-SECRET-BODY", "INTERNAL-SECRET-MESSAGE"
	redfishErr := fmt.Sprintf(`{"error":{"code":"Base.1.0.GeneralError","message":%q,"@Message.ExtendedInfo":[{"MessageId":"Base.1.0.InternalError","Message":%q}]}}`, message, message)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := "http://" + closed.Addr().String()
	closed.Close()
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsSrv.Close)
	plain := hostile(t, 200, `{"`+body+`":1}`)
	for _, tc := range []struct {
		name, address, summary, raw string
	}{
		{"404", hostile(t, 404, "<html>"+body+"</html>"), "HTTP 404 from the BMC", body},
		{"500", hostile(t, 500, body), "the BMC answered with an error (HTTP 500 from the BMC)", body},
		{"403", hostile(t, 403, body), "the BMC refused the credentials (HTTP 403 from the BMC)", body},
		{"redfish 500", hostile(t, 500, redfishErr), "the BMC answered with an error (HTTP 500 from the BMC)", message},
		{"closed port", closedAddr, "the BMC did not answer (unreachable)", ""},
		{"unknown authority", tlsSrv.URL, "signed by an unknown authority", ""},
		{"TLS to plain HTTP", strings.Replace(plain, "http://", "https://", 1), "does not speak TLS", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := strings.TrimPrefix(strings.TrimPrefix(tc.address, "http://"), "https://")
			_, port, _ := net.SplitHostPort(host)
			storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
				srv, clients := startLocal(t, setting, bmcOpts)
				admin := atVer(clients["system-admin"], api.VerMax)
				member := atVer(clients["owner-member"], api.VerMax)
				lessee := atVer(clients["lessee-reader"], api.VerMax)
				r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "probe", "driver": "redfish", "owner": "own", "lessee": "les",
					"driver_info": map[string]any{"redfish_address": "https://10.0.0.1", "redfish_username": "u", "redfish_password": "p"}})
				mustStatus(t, r, 201)
				id := r.JSON(t)["uuid"].(string)
				mustStatus(t, member.Do(t, "PATCH", "/v1/nodes/"+id, []map[string]any{
					{"op": "replace", "path": "/driver_info/redfish_address", "value": tc.address},
					{"op": "replace", "path": "/driver_info/redfish_password", "value": "p"}}), 200)
				mustStatus(t, member.Do(t, "PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power on"}), 202)
				n := waitPower(t, member, id)
				if le, _ := n["last_error"].(string); !strings.Contains(le, tc.summary) {
					t.Fatalf("last_error %q lacks %q", le, tc.summary)
				}
				leaks := func(who, what, text string) {
					t.Helper()
					for _, secret := range []string{body, message, host, ":" + port} {
						if strings.Contains(text, secret) {
							t.Errorf("%s's %s shows %q:\n%s", who, what, secret, text)
						}
					}
				}
				for who, c := range map[string]*servertest.Client{"owner-member": member, "lessee-reader": lessee} {
					h := c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
					mustStatus(t, h, 200)
					if !strings.Contains(string(h.Body), tc.summary) {
						t.Errorf("%s's history lacks %q: %s", who, tc.summary, h.Body)
					}
					leaks(who, "history", string(h.Body))
					for _, e := range h.JSON(t)["history"].([]any) {
						one := c.Do(t, "GET", "/v1/nodes/"+id+"/history/"+e.(map[string]any)["uuid"].(string), nil)
						mustStatus(t, one, 200)
						leaks(who, "history event", string(one.Body))
					}
					n := c.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
					leaks(who, "last_error", fmt.Sprint(n["last_error"]))
					leaks(who, "driver_internal_info", fmt.Sprint(n["driver_internal_info"]))
				}
				// The lessee does not read driver_info, so nothing of the
				// node names the host.
				leaks("lessee-reader", "node", string(lessee.Do(t, "GET", "/v1/nodes/"+id, nil).Body))
				for _, persona := range []string{"owner-member", "lessee-reader"} {
					page := portalAs(t, srv, persona)("/nodes/" + id)
					if !strings.Contains(page, tc.summary) {
						t.Errorf("%s's node page lacks %q", persona, tc.summary)
					}
					if persona == "owner-member" {
						// The owner's member reads driver_info, as through
						// the API, so the page's BMC settings form shows the
						// address it wrote; never what answered there.
						for _, secret := range []string{body, message} {
							if secret != "" && strings.Contains(page, secret) {
								t.Errorf("owner-member's node page shows the BMC's answer %q", secret)
							}
						}
						continue
					}
					leaks(persona, "node page", page)
				}
				// Operators keep the raw answer.
				h := admin.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
				mustStatus(t, h, 200)
				raw := tc.raw
				if raw == "" {
					raw = host
				}
				if !strings.Contains(string(h.Body), raw) {
					t.Errorf("system admin's history lacks %q: %s", raw, h.Body)
				}
			})
		})
	}
}

// TestImageURLsLoseTheirSecrets: an image URL with a password and signed
// query tokens reaches the BMC whole; every copy Anvil keeps (history,
// audit, driver_internal_info) and every answer to a caller below system
// admin (virtual media, driver_info, instance_info, the portal) shows it
// without them. The system admin reads the URLs as stored.
func TestImageURLsLoseTheirSecrets(t *testing.T) {
	iso := servertest.ServeISO(t)
	const sig, tempSig = "c2lnbmF0dXJlLXZhbHVlLTAxMjM0NTY3ODk", "TEMPURLSIG"
	full := strings.Replace(iso, "http://", "http://u:p@", 1) + "?token=abcdef&X-Amz-Signature=" + sig + "&temp_url_sig=" + tempSig + "&temp_url_expires=1700000000"
	secrets := []string{"p@", "abcdef", sig, tempSig}
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		sim := bmctest.StartRedfish(t)
		srv, clients := startLocal(t, setting, bmcOpts)
		admin := atVer(clients["system-admin"], api.VerMax)
		member := atVer(clients["owner-member"], api.VerMax)
		lessee := atVer(clients["lessee-reader"], api.VerMax)
		info := sim.DriverInfo("1")
		info["deploy_iso"] = full
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "img", "driver": "redfish", "owner": "own", "lessee": "les",
			"driver_info": info, "instance_info": map[string]any{"image_source": full, "boot_iso": full, "kernel": full}})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		path := "/v1/nodes/" + id + "/vmedia"
		mustStatus(t, member.Do(t, "POST", path, map[string]any{"device_type": "cdrom", "image_url": full}), 204)
		vmediaSettled(t, admin, id)
		if image, inserted := sim.CD(t, "1"); image != full || !inserted {
			t.Fatalf("the BMC has %q (inserted %v), want %s", image, inserted, full)
		}
		leaks := func(who, what, text string) {
			t.Helper()
			for _, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("%s's %s shows %q:\n%s", who, what, s, text)
				}
			}
		}
		for who, c := range map[string]*servertest.Client{"owner-member": member, "lessee-reader": lessee} {
			v := c.Do(t, "GET", path, nil)
			mustStatus(t, v, 200)
			if !strings.Contains(string(v.Body), "token=***") {
				t.Errorf("%s's vmedia does not show the stripped URL: %s", who, v.Body)
			}
			leaks(who, "vmedia", string(v.Body))
			n := c.Do(t, "GET", "/v1/nodes/"+id, nil)
			mustStatus(t, n, 200)
			leaks(who, "node", string(n.Body))
			h := c.Do(t, "GET", "/v1/nodes/"+id+"/history?detail=true", nil)
			mustStatus(t, h, 200)
			leaks(who, "history", string(h.Body))
			mustStatus(t, c.Do(t, "GET", "/v1/events", nil), 403)
			leaks(who, "node page", portalAs(t, srv, who)("/nodes/"+id))
		}
		// The owner member reads driver_info: its deploy image is there,
		// stripped.
		n := member.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if d, _ := n["driver_info"].(map[string]any)["deploy_iso"].(string); !strings.Contains(d, "http://***@") {
			t.Errorf("owner member's deploy_iso %q", d)
		}

		// The system admin reads the URLs as stored and as the BMC has
		// them; Anvil's own records are stripped for everyone.
		v := admin.Do(t, "GET", path, nil)
		mustStatus(t, v, 200)
		if !strings.Contains(string(v.Body), jsonText(full)) {
			t.Errorf("system admin's vmedia lacks the full URL: %s", v.Body)
		}
		an := admin.Do(t, "GET", "/v1/nodes/"+id, nil).JSON(t)
		if an["instance_info"].(map[string]any)["image_source"] != full {
			t.Errorf("system admin's instance_info %v", an["instance_info"])
		}
		leaks("system-admin", "driver_internal_info", fmt.Sprint(an["driver_internal_info"]))
		for _, q := range []string{"/v1/nodes/" + id + "/history?detail=true", "/v1/events?rule=baremetal:node:vmedia:attach"} {
			r := admin.Do(t, "GET", q, nil)
			mustStatus(t, r, 200)
			if !strings.Contains(string(r.Body), "token=***") {
				t.Errorf("%s lacks the stripped URL: %s", q, r.Body)
			}
			leaks("system-admin", q, string(r.Body))
		}
	})
}

// jsonText is s as encoding/json writes it inside a string ("&" escaped).
func jsonText(s string) string {
	return strings.ReplaceAll(s, "&", `\u0026`)
}

// TestPatchReadsURLsStripped: a JSON patch reads image URLs as its
// caller's GET shows them. An owner member who may update instance_info
// can neither copy a signed URL into extra (lessees read it) nor probe
// it with test, and a patch that leaves a URL as it saw it, stripped,
// keeps the stored URL whole for the BMC.
func TestPatchReadsURLsStripped(t *testing.T) {
	const sig = "c2lnbmF0dXJlLXZhbHVlLTAxMjM0NTY3ODk"
	full := "http://u:pw-in-url@127.0.0.1:1/img.raw?temp_url_sig=" + sig + "&temp_url_expires=1700000000"
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		_, clients := startLocal(t, setting)
		admin := atVer(clients["system-admin"], api.VerMax)
		member := atVer(clients["owner-member"], api.VerMax)
		r := admin.Do(t, "POST", "/v1/nodes", map[string]any{"name": "urls", "driver": "fake-hardware", "owner": "own", "lessee": "les",
			"driver_info":   map[string]any{"deploy_kernel": full},
			"instance_info": map[string]any{"image_source": full, "nested": map[string]any{"url": full, "n": 1}}})
		mustStatus(t, r, 201)
		id := r.JSON(t)["uuid"].(string)
		node := "/v1/nodes/" + id

		mustStatus(t, member.Do(t, "PATCH", node, []map[string]any{
			{"op": "copy", "from": "/instance_info/image_source", "path": "/extra/img"},
			{"op": "copy", "from": "/instance_info/nested", "path": "/extra/nested"},
		}), 200)
		if r := member.Do(t, "PATCH", node, []map[string]any{{"op": "test", "path": "/instance_info/image_source", "value": full}}); r.Status < 400 {
			t.Errorf("a test against the whole URL passed for the owner member: %d", r.Status)
		}
		// Changes beside the URLs, at both depths and by a whole replace
		// of what the member saw: the stored URLs stay whole.
		seen := member.Do(t, "GET", node, nil).JSON(t)["instance_info"].(map[string]any)
		seen["added"] = "yes"
		mustStatus(t, member.Do(t, "PATCH", node, []map[string]any{
			{"op": "replace", "path": "/instance_info", "value": seen},
			{"op": "replace", "path": "/instance_info/nested/n", "value": 2},
			{"op": "copy", "from": "/driver_info/deploy_kernel", "path": "/driver_info/deploy_ramdisk"},
		}), 200)

		for _, who := range []string{"owner-member", "lessee-reader"} {
			body := string(clients[who].Do(t, "GET", node, nil).Body)
			for _, s := range []string{"pw-in-url", sig} {
				if strings.Contains(body, s) {
					t.Errorf("%s reads %q after the patches:\n%s", who, s, body)
				}
			}
		}
		n := admin.Do(t, "GET", node, nil).JSON(t)
		ii := n["instance_info"].(map[string]any)
		if ii["image_source"] != full || ii["nested"].(map[string]any)["url"] != full || ii["added"] != "yes" {
			t.Errorf("the stored instance_info lost a URL or a change: %v", ii)
		}
		if n["instance_info"].(map[string]any)["nested"].(map[string]any)["n"] != float64(2) {
			t.Errorf("nested change lost: %v", ii)
		}
		di := n["driver_info"].(map[string]any)
		if di["deploy_kernel"] != full {
			t.Errorf("deploy_kernel is %v, want it whole", di["deploy_kernel"])
		}
		if s, _ := di["deploy_ramdisk"].(string); strings.Contains(s, "pw-in-url") || strings.Contains(s, sig) {
			t.Errorf("a copy made by the owner member holds the credentials it was never shown: %q", s)
		}
		if img, _ := n["extra"].(map[string]any)["img"].(string); !strings.Contains(img, "***") || strings.Contains(img, sig) {
			t.Errorf("extra.img = %q, want the stripped URL", img)
		}
	})
}
