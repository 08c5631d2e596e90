package conductor_test

import (
	"testing"

	"github.com/anvilproject/anvil/server/conductor"
)

// TestShownURL: an image URL is kept, shown and audited without the
// password its userinfo may carry, and otherwise as given.
func TestShownURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://images.example/boot.iso":                 "http://images.example/boot.iso",
		"https://anvil:s3cret@images.example:8443/b.iso": "https://anvil@images.example:8443/b.iso",
		"https://anvil@images.example/b.iso?x=1":         "https://anvil@images.example/b.iso?x=1",
		"https://:only-pw@images.example/b.iso":          "https://images.example/b.iso",
		"http://anvil:s3cret@[::1/boot.iso":              "(unparsable URL withheld)",
	} {
		if got := conductor.ShownURL(in); got != want {
			t.Errorf("ShownURL(%q) = %q, want %q", in, got, want)
		}
	}
}
