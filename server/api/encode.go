package api

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// jw appends JSON by hand for the node list: a detailed page of a thousand
// nodes is the API's hottest path, and writing fields in order into one
// buffer avoids building a map per node only to have encoding/json sort it.
type jw struct {
	b     []byte
	first bool
	// conductor maps a node to the conductor the hash ring gives it; set
	// only when the response holds the conductor field.
	conductor func(uuid, group string) string
	// base is the URL the response's links start with, already escaped
	// for a JSON string: it comes from the request's Host header, and a
	// thousand nodes' five link pairs each would escape it ten thousand
	// times.
	base string
}

// setBase sets the links' base URL.
func (w *jw) setBase(base string) {
	w.base = string(appendEscaped(nil, base))
}

func (w *jw) open()  { w.b = append(w.b, '{'); w.first = true }
func (w *jw) close() { w.b = append(w.b, '}'); w.first = false }

// key starts a member. Keys are the names in Anvil's own field tables,
// never input, so they are written as they are (TestFieldNamesNeedNoEscape
// holds them to that); escaping them was a tenth of a detailed list's
// encoding time.
func (w *jw) key(k string) {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

func (w *jw) str(k, v string) { w.key(k); w.b = appendString(w.b, v) }

func (w *jw) strp(k string, v *string) {
	w.key(k)
	if v == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = appendString(w.b, *v)
}

// proj writes an owner/lessee, which is stored as "" when unset.
func (w *jw) proj(k, v string) {
	w.key(k)
	if v == "" {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = appendString(w.b, v)
}

func (w *jw) boolean(k string, v bool) { w.key(k); w.b = strconv.AppendBool(w.b, v) }

func (w *jw) boolp(k string, v *bool) {
	if v == nil {
		w.key(k)
		w.b = append(w.b, "null"...)
		return
	}
	w.boolean(k, *v)
}

func (w *jw) time(k string, t *time.Time) {
	w.key(k)
	if t == nil || t.IsZero() {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '"')
	w.b = t.UTC().AppendFormat(w.b, "2006-01-02T15:04:05.000000+00:00")
	w.b = append(w.b, '"')
}

func (w *jw) any(k string, v any) {
	w.key(k)
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("null")
	}
	w.b = append(w.b, b...)
}

func (w *jw) obj(k string, m map[string]any) {
	w.key(k)
	if len(m) == 0 {
		// Most nodes' dict fields are empty; a detailed list has several
		// per node, so they skip the encoder.
		w.b = append(w.b, "{}"...)
		return
	}
	if b, ok := appendValue(w.b, m); ok {
		w.b = b
		return
	}
	b, err := json.Marshal(m)
	if err != nil {
		b = []byte("null")
	}
	w.b = append(w.b, b...)
}

// appendValue appends v as encoding/json would, byte for byte, for what
// decoded JSON holds (maps, lists, strings, float64s, booleans, null),
// and reports false for anything else, which the caller hands to
// encoding/json. A detailed page holds thousands of small dicts
// (properties, driver_info, instance_info, steps), and reflection plus a
// buffer per dict was most of their cost.
func appendValue(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendString(b, x), true
	case bool:
		return strconv.AppendBool(b, x), true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return b, false
		}
		// encoding/json's float format: plain unless very small or large,
		// and an exponent without a leading zero.
		format := byte('f')
		if abs := math.Abs(x); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
			format = 'e'
		}
		b = strconv.AppendFloat(b, x, format, -1, 64)
		if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
		return b, true
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendValue(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendValue(b, x[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

func (w *jw) strs(k string, v []string) {
	w.key(k)
	w.b = append(w.b, '[')
	for i, s := range v {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = appendString(w.b, s)
	}
	w.b = append(w.b, ']')
}

// subLinks writes a link pair to one of a node's sub-resources, named
// like it, as Ironic's node shows ports, portgroups, states and volume.
func (w *jw) subLinks(uuid, name string) { w.nodeLinks(name, uuid, name) }

// nodeLinks writes the link pair of a node (sub "") or of one of its
// sub-resources. The hrefs are appended in pieces, not concatenated
// first: a detailed list writes five pairs per node.
func (w *jw) nodeLinks(key, uuid, sub string) {
	w.key(key)
	for i, rel := range [2]string{"self", "bookmark"} {
		if i == 0 {
			w.b = append(w.b, `[{"href":"`...)
		} else {
			w.b = append(w.b, `,{"href":"`...)
		}
		w.b = append(w.b, w.base...)
		if i == 0 {
			w.b = append(w.b, "/v1"...)
		}
		w.b = append(w.b, "/nodes/"...)
		w.b = appendEscaped(w.b, uuid)
		if sub != "" {
			w.b = append(w.b, '/')
			w.b = append(w.b, sub...)
		}
		w.b = append(w.b, `","rel":"`...)
		w.b = append(w.b, rel...)
		w.b = append(w.b, `"}`...)
	}
	w.b = append(w.b, ']')
}

func (w *jw) links(self, bookmark string) { w.linksAt("links", self, bookmark) }

func (w *jw) linksAt(key, self, bookmark string) {
	w.key(key)
	w.b = append(w.b, `[{"href":`...)
	w.b = appendString(w.b, self)
	w.b = append(w.b, `,"rel":"self"},{"href":`...)
	w.b = appendString(w.b, bookmark)
	w.b = append(w.b, `,"rel":"bookmark"}]`...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping what JSON requires
// plus <, > and & as encoding/json does, and replacing invalid UTF-8.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendEscaped(b, s)
	return append(b, '"')
}

// appendEscaped appends s escaped for the inside of a JSON string.
func appendEscaped(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}
