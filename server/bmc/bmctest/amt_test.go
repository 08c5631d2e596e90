package bmctest

import (
	"context"
	"crypto/md5" //nolint:gosec // digest auth is MD5
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bmc-toolbox/bmclib/v2/providers/intelamt"
)

// startAMT serves a fake AMT and returns it with its port.
func startAMT(t *testing.T, power string) (*AMT, uint32) {
	t.Helper()
	a := NewAMT("admin", "Amt-p4ss!", power)
	ts := httptest.NewServer(a)
	t.Cleanup(ts.Close)
	return a, uint32(ts.Listener.Addr().(*net.TCPAddr).Port)
}

// TestAMTThroughIntelAMT drives the fake with bmclib's own intelamt
// provider: power on and off, SetPXE and the boot it sets up, and a
// wrong password, which every request is refused for.
func TestAMTThroughIntelAMT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, port := startAMT(t, "off")
	c := intelamt.New("127.0.0.1", a.User, a.Password, intelamt.WithPort(port))
	if err := c.Open(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"on", "off"} {
		if ok, err := c.PowerSet(ctx, want); !ok || err != nil {
			t.Fatalf("power %s: %v %v", want, ok, err)
		}
		if got, err := c.PowerStateGet(ctx); got != want || err != nil || a.State().Power != want {
			t.Fatalf("after power %s: provider says %q (%v), fake %q", want, got, err, a.State().Power)
		}
	}
	if ok, err := c.BootDeviceSet(ctx, "pxe", false, false); !ok || err != nil {
		t.Fatalf("SetPXE: %v %v", ok, err)
	}
	st := a.State()
	for _, want := range []string{"Get AMT_BootSettingData", "Put AMT_BootSettingData", "SetBootConfigRole 1", "ChangeBootOrder " + amtPXESource} {
		if !slices.Contains(st.Actions, want) {
			t.Errorf("SetPXE did not make %q: %v", want, st.Actions)
		}
	}
	if !st.PXENext {
		t.Fatalf("SetPXE left the next boot not PXE: %v", st.Actions)
	}
	for _, want := range []string{"pxe", "disk"} {
		if _, err := c.PowerSet(ctx, "on"); err != nil {
			t.Fatal(err)
		}
		if st := a.State(); st.Boots[len(st.Boots)-1] != want || st.PXENext {
			t.Fatalf("boot %d: %v, PXE still next %v", len(st.Boots), st.Boots, st.PXENext)
		}
		if _, err := c.PowerSet(ctx, "off"); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.State(); st.Refused != 0 || len(st.Faults) != 0 {
		t.Fatalf("refused %d, faults %v", st.Refused, st.Faults)
	}

	bad := intelamt.New("127.0.0.1", a.User, "not-it", intelamt.WithPort(port))
	if err := bad.Open(ctx); err != nil {
		t.Fatal(err) // Open only fetches the challenge
	}
	if _, err := bad.PowerStateGet(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong password: %v", err)
	}
	if st := a.State(); st.Refused != 2 || st.Power != "off" {
		// iamt answers a 401 with one retry on the new challenge.
		t.Fatalf("wrong password: %d refused, power %s", st.Refused, st.Power)
	}
}

// TestAMTDigest checks the digest rules the provider does not exercise:
// a replayed nonce count, a nonce the fake never gave, another URI.
func TestAMTDigest(t *testing.T) {
	a, port := startAMT(t, "on")
	url := fmt.Sprintf("http://127.0.0.1:%d/wsman", port)
	post := func(auth string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(""))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := post("")
	p, ok := digestParams(strings.TrimPrefix(resp.Header.Get("WWW-Authenticate"), "Digest "))
	if resp.StatusCode != 401 || !ok || p["qop"] != "auth" {
		t.Fatalf("challenge: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	h := func(s string) string { sum := md5.Sum([]byte(s)); return hex.EncodeToString(sum[:]) } //nolint:gosec // digest auth
	sign := func(nonce, uri, nc, pass string) string {
		r := h(h(a.User+":"+p["realm"]+":"+pass) + ":" + nonce + ":" + nc + ":c0ffee:auth:" + h("POST:"+uri))
		return fmt.Sprintf(`Digest username="%s",realm="%s",nonce="%s",uri="%s",response="%s",algorithm="MD5",qop=auth,nc=%s,cnonce="c0ffee"`,
			a.User, p["realm"], nonce, uri, r, nc)
	}
	// An authenticated empty body gets past the digest to a SOAP fault.
	if resp := post(sign(p["nonce"], "/wsman", "00000002", a.Password)); resp.StatusCode != 400 {
		t.Fatalf("good digest: %d", resp.StatusCode)
	}
	for name, auth := range map[string]string{
		"replayed count": sign(p["nonce"], "/wsman", "00000002", a.Password),
		"unknown nonce":  sign("0123456789abcdef", "/wsman", "00000003", a.Password),
		"another URI":    sign(p["nonce"], "/other", "00000004", a.Password),
		"wrong password": sign(p["nonce"], "/wsman", "00000005", "guess"),
	} {
		if resp := post(auth); resp.StatusCode != 401 {
			t.Errorf("%s: %d", name, resp.StatusCode)
		}
	}
	if st := a.State(); st.Refused != 4 || len(st.Faults) != 1 {
		t.Errorf("refused %d (want 4), faults %v", st.Refused, st.Faults)
	}
}
