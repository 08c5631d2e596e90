package bmc

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-multierror"
	pkgerrors "github.com/pkg/errors"
)

// TestBmclibFailuresAreClassified: bmclib joins every provider's failure
// into one text; the words it gives decide the kind, the summary keeps
// only Anvil's, and what the other end said stays in the detail with
// credentials masked.
func TestBmclibFailuresAreClassified(t *testing.T) {
	c, err := openBmclib(map[string]any{"bmclib_provider": "rpc", "bmclib_rpc_url": "http://127.0.0.1:9/hook", "bmclib_rpc_secret": "hmac-key"}, Options{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	// As bmclib builds them: the provider's error with its name, in a
	// multierror, then its own closing sentence.
	joined := func(e error, closing string) error {
		var m *multierror.Error
		m = multierror.Append(m, pkgerrors.WithMessagef(e, "provider: rpc"))
		return multierror.Append(m, errors.New(closing))
	}
	for _, tc := range []struct {
		err    error
		kind   error
		status int
	}{
		{joined(errors.New("unexpected status code: 401, response error(optional): code: 401, message: hmac-key refused"), "no Opener implementations found"), ErrAuth, 401},
		{joined(errors.New("unexpected status code: 404, response error(optional): <nil>"), "failed to set power state"), ErrUnsupported, 404},
		{joined(errors.New("unexpected status code: 500, response error(optional): <nil>"), "failed to get power state"), ErrBMC, 500},
		{joined(errors.New("not a BootDeviceSetter implementation: *rpc.Provider"), "no BootDeviceSetter implementations found"), ErrUnsupported, 0},
		{joined(fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), "no Opener implementations found"), ErrTLS, 0},
	} {
		err := c.explain("setting power on", tc.err)
		var e *Error
		if !errors.As(err, &e) || e.Kind != tc.kind || e.Status != tc.status || e.Op != "setting power on" {
			t.Errorf("%v: got %#v", tc.err, err)
			continue
		}
		if strings.Contains(err.Error(), "hmac-key") || strings.Contains(Summary(err), "refused") && tc.kind != ErrAuth {
			t.Errorf("%v: the secret or the far end's words leak: %q / %q", tc.err, err.Error(), Summary(err))
		}
		if tc.kind == ErrTLS && !strings.Contains(Summary(err), "bmclib_verify_ca") {
			t.Errorf("unknown CA names %q", Summary(err))
		}
	}
}

// TestBmclibOffersWhatTheProviderHas: the steps each provider offers are
// bmclib's own feature lists, less Home Assistant's no-op boot device;
// firmware.update exactly for the providers with a vendor push flow.
func TestBmclibOffersWhatTheProviderHas(t *testing.T) {
	for p, want := range map[string]string{
		"rpc":           "management.set_boot_device",
		"homeassistant": "",
		"intelamt":      "management.set_boot_device",
		"dell":          "firmware.update,management.reset_bmc,management.screenshot",
		"supermicro":    "firmware.update,management.reset_bmc,management.screenshot",
		"openbmc":       "firmware.update,management.reset_bmc",
		"asrockrack":    "firmware.update,management.get_post_code,management.reset_bmc",
		"ipmitool":      "management.clear_event_log,management.clear_sel,management.get_sel,management.reset_bmc,management.set_boot_device",
		"redfish":       "management.clear_event_log,management.clear_sel,management.reset_bmc,management.set_boot_device",
		"nonesuch":      "",
	} {
		if got := strings.Join(BmclibSteps(p), ","); got != want {
			t.Errorf("%s offers %s, want %s", p, got, want)
		}
		if BmclibOffers(p, "power.reboot") != (p != "nonesuch") {
			t.Errorf("%s: power.reboot offered %v", p, BmclibOffers(p, "power.reboot"))
		}
	}
}
