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

// TestForeignBodiesStayOutOfTheSummary: neither a Redfish error's
// message nor any other body (an internal service behind a BMC address)
// reaches the summary, only the operator's text; the summary says the
// class and the status.
func TestForeignBodiesStayOutOfTheSummary(t *testing.T) {
	rf := common.ConstructError(500, []byte(`{"error":{"code":"Base.1.0.GeneralError","message":"fan 3 failed"}}`))
	e := classify("setting power on", "10.0.0.1:443", rf, nil)
	if e.Kind != ErrBMC || Summary(e) != "the BMC answered with an error (HTTP 500 from the BMC)" || !strings.Contains(e.Error(), "fan 3 failed") {
		t.Fatalf("redfish error: summary %q, detail %q", Summary(e), e.Error())
	}
	if c, ok := ClassOf(e); !ok || c != (Class{Kind: "bmc", Status: 500}) {
		t.Fatalf("class %+v", c)
	}
	other := common.ConstructError(404, []byte("<html>internal wiki: secret plans</html>"))
	e = classify("setting power on", "10.0.0.1:443", other, nil)
	if strings.Contains(Summary(e), "wiki") || !strings.Contains(e.Error(), "wiki") || !strings.Contains(Summary(e), "HTTP 404 from the BMC") {
		t.Fatalf("foreign body: summary %q, detail %q", Summary(e), e.Error())
	}
}
