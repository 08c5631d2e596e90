package web_test

import (
	"net/url"
	"testing"
)

// TestSafeNextThroughLogin: signing in returns only to a plain path of
// this site. Every way a browser, or a hop that decodes the target, could
// turn "next" into another site (control characters that browsers drop,
// a backslash they read as a slash, "//" after decoding, a scheme) sends
// the user to the start page instead; plain paths with a query pass.
func TestSafeNextThroughLogin(t *testing.T) {
	const refused = "(refused)"
	srv := withMember(t)
	for next, want := range map[string]string{
		"/ok?x=1":                        "/ok?x=1",
		"/nodes/abc":                     "/nodes/abc",
		"/nodes?sort=name&q=a%20b":       "/nodes?sort=name&q=a%20b",
		"/\t/evil.example":               "/nodes",
		"/%09/evil.example":              "/nodes",
		"/\r\n/evil.example":             "/nodes",
		"/%0d%0a/evil.example":           "/nodes",
		"/\x00/evil.example":             refused,
		"/%00/evil.example":              "/nodes",
		"/nodes?x=%0aLocation:%20//evil": "/nodes",
		"/\\evil.example":                "/nodes",
		"/%5cevil.example":               "/nodes",
		"/%5Cevil.example":               "/nodes",
		"/\\/evil.example":               "/nodes",
		"//evil.example":                 "/nodes",
		"///evil.example":                "/nodes",
		"/%2f/evil.example":              "/nodes",
		"/%2F%2Fevil.example":            "/nodes",
		"/%252f/evil.example":            "/nodes",
		"/.//evil.example":               "/nodes",
		"https://evil.example":           "/nodes",
		"HTTPS://evil.example/":          "/nodes",
		"javascript:alert(1)":            "/nodes",
		"evil.example":                   "/nodes",
		"/%zz":                           "/nodes",
		"/\u0085/evil.example":           "/nodes",
		"/login?next=/x":                 "/nodes",
		"/%6cogin":                       "/nodes",
	} {
		b := newBrowser(t, srv.URL)
		b.do("GET", "/login", nil)
		st, _, h := b.do("POST", "/login", url.Values{"csrf": {b.csrf}, "username": {"pat"}, "password": {"pat-password-1"}, "next": {next}})
		if want == refused {
			// A raw NUL is invalid text: the form is refused whole
			// before sign-in, so it redirects nowhere.
			if st != 400 || h.Get("Location") != "" {
				t.Errorf("next %q: %d Location %q, want 400 and none", next, st, h.Get("Location"))
			}
			continue
		}
		if st != 303 || h.Get("Location") != want {
			t.Errorf("next %q: %d Location %q, want %q", next, st, h.Get("Location"), want)
		}
	}
}
