package bmc

import (
	"strings"
	"testing"

	"github.com/stmcginnis/gofish/common"
)

// TestMaskWholeTokensOnly: credentials are masked where they stand as
// tokens, never inside other words.
func TestMaskWholeTokensOnly(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"an error occurred", "an error occurred"},
		{"user occ refused", "user ****** refused"},
		{"password=occ;", "password=******;"},
		{"occ", "******"},
		{"occ occ occ", "****** ****** ******"},
		{"p@ss-w0rd! was wrong", "****** was wrong"},
		{"socc occs", "socc occs"},
	} {
		if got := mask(tc.in, []string{"occ", "p@ss-w0rd!"}); got != tc.want {
			t.Errorf("mask(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestForeignBodiesStayOutOfTheSummary: a Redfish error's message is
// shown; any other body (an internal service behind a BMC address) only
// in the operator's detail.
func TestForeignBodiesStayOutOfTheSummary(t *testing.T) {
	rf := common.ConstructError(500, []byte(`{"error":{"code":"Base.1.0.GeneralError","message":"fan 3 failed"}}`))
	e := classify("setting power on", "10.0.0.1:443", rf, nil)
	if e.Kind != ErrBMC || Summary(e) != "the BMC answered with an error: HTTP 500 fan 3 failed" {
		t.Fatalf("redfish error: %q", Summary(e))
	}
	other := common.ConstructError(500, []byte("<html>internal wiki: secret plans</html>"))
	e = classify("setting power on", "10.0.0.1:443", other, nil)
	if strings.Contains(Summary(e), "wiki") || !strings.Contains(e.Error(), "wiki") {
		t.Fatalf("foreign body: summary %q, detail %q", Summary(e), e.Error())
	}
}
