// Package urlsafe strips the credentials an image URL may carry (a
// password in its userinfo, a signed query's token) from every copy that
// is stored or shown: only the BMC, which fetches the image, needs them,
// and a node's readers include its next lessee.
package urlsafe

import (
	"net/url"
	"regexp"
	"strings"
)

// Hidden stands where a credential was, so people see that one was there.
const Hidden = "***"

// Withheld replaces a URL that does not parse: where its secrets are
// cannot be told.
const Withheld = "(unparsable URL withheld)"

// Strip returns raw without its credentials: the userinfo becomes ***,
// and so does the value of every query parameter that is named like a
// credential or looks like a token. Everything else is kept as written.
func Strip(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return Withheld
	}
	if u.RawQuery != "" {
		u.RawQuery = stripQuery(u.RawQuery)
	}
	if u.User == nil {
		return u.String()
	}
	// url escapes "*" in userinfo; the mark goes in by hand, after the
	// "//" that a URL with userinfo always has.
	u.User = nil
	return strings.Replace(u.String(), "//", "//"+Hidden+"@", 1)
}

// stripQuery hides credentials in a raw query, keeping the order and
// the encoding of what stays.
func stripQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, v, has := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			value = v
		}
		if has && v != "" && (SecretName(name) || LooksLikeToken(value)) {
			parts[i] = k + "=" + Hidden
		}
	}
	return strings.Join(parts, "&")
}

// secretNames are query parameters that carry credentials wherever
// they appear (Swift's temp_url_sig, Azure's sig, plain token and key).
var secretNames = []string{"token", "sig", "signature", "auth", "key", "apikey", "api_key", "password", "passwd", "pass", "pwd", "secret", "temp_url_sig"}

// secretParts are words that make any parameter naming them a
// credential: access_token, client_secret, X-Goog-Signature.
var secretParts = []string{"token", "secret", "password", "signature", "credential"}

// secretPrefixes mark whole families: every X-Amz-* of an S3 presigned
// URL (the signature, credential and security token among them).
var secretPrefixes = []string{"x-amz-", "x-goog-", "credential"}

// SecretName reports whether a query parameter's name says it carries a
// credential; case does not matter.
func SecretName(name string) bool {
	n := strings.ToLower(name)
	for _, s := range secretNames {
		if n == s {
			return true
		}
	}
	for _, p := range secretPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, s := range secretParts {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// minToken is the shortest unbroken run of token characters taken for a
// token: long enough that words and version numbers never reach it.
const minToken = 20

// LooksLikeToken reports whether v holds a run of at least minToken
// base64, hex or URL-safe characters that mixes at least two of upper
// case, lower case and digits: what random secrets look like. Names and
// versions break into short runs at dots, dashes and slashes
// ("ubuntu-22.04-live-server-amd64"), and a long run of one class
// ("0000000000000000000000") carries no secret.
func LooksLikeToken(v string) bool {
	run, classes := 0, 0
	for i := 0; i <= len(v); i++ {
		c := byte(0)
		if i < len(v) {
			c = v[i]
		}
		var class int
		switch {
		case c >= 'a' && c <= 'z':
			class = 1
		case c >= 'A' && c <= 'Z':
			class = 2
		case c >= '0' && c <= '9':
			class = 4
		case c == '+' || c == '=' || c == '_':
			// base64 and URL-safe base64 padding and letters.
		default:
			if run >= minToken && classes&(classes-1) != 0 {
				return true
			}
			run, classes = 0, 0
			continue
		}
		run++
		classes |= class
	}
	return false
}

// inText finds URLs in text: a scheme, "://" and what follows up to a
// space or a quote.
var inText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// Text is s with Strip applied to every URL in it: a message or an error
// may quote one.
func Text(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return inText.ReplaceAllStringFunc(s, Strip)
}

// StripAll returns a copy of v with Text applied to every string in it,
// through nested objects and lists: an instance_info or a step's
// arguments hold image URLs under many keys.
func StripAll(v any) any {
	switch x := v.(type) {
	case string:
		return Text(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = StripAll(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = StripAll(e)
		}
		return out
	}
	return v
}

// StripMap is StripAll for an object; nil stays nil.
func StripMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return StripAll(m).(map[string]any)
}
