package bmc

import "testing"

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
