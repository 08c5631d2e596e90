// Package validtext refuses text that is not text: a NUL character or
// bytes that are not UTF-8, in a request's strings. PostgreSQL stores
// neither (a NUL in a text or jsonb value fails the write, a 500), SQLite
// would store what PostgreSQL cannot, and Go's JSON decoder silently
// turns invalid bytes into U+FFFD; so the API and the portal refuse them
// at the door with a 400 naming where they stood, before any service
// reads the request, and every resource is covered at once.
package validtext

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/anvilproject/anvil/server/errs"
)

// String refuses s when it holds a NUL or is not UTF-8, naming field.
func String(field, s string) error {
	if why := problem(s); why != "" {
		return errs.BadRequest(field, "%s %s", field, why)
	}
	return nil
}

func problem(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "is not valid UTF-8 text"
	case strings.IndexByte(s, 0) >= 0:
		return "holds a NUL character (\\u0000), which cannot be stored"
	}
	return ""
}

// frame is one open JSON container while walking a document.
type frame struct {
	object bool
	key    string // the current member's key (object)
	index  int    // the current element's index (array)
	// wantKey: the next string in this object is a key.
	wantKey bool
}

// JSON refuses a JSON document any of whose strings, keys or values at
// any depth, holds a NUL or is not UTF-8, naming the field by its path
// ("extra.foo", "steps[0].args.x"); a JSON patch names the field it
// writes (the op's path) rather than its place in the list. A body that
// is not JSON passes: whoever decodes it says what is wrong.
func JSON(body []byte) error { return JSONUnder("", body) }

// JSONUnder is JSON for a document found under field (a form field that
// holds JSON); its paths start with field.
func JSONUnder(field string, body []byte) error {
	at, why := walk(body)
	if why == "" {
		return nil
	}
	name := patchField(body, at)
	if name == "" {
		name = join(field, at)
	}
	return errs.BadRequest(name, "%s %s", name, why)
}

// walk returns the path of the first bad string and what is wrong with
// it; why is "" when there is none (or the body is not JSON).
func walk(body []byte) (at []any, why string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var stack []*frame
	prev := int64(0)
	path := func(last any) []any {
		out := make([]any, 0, len(stack)+1)
		for _, f := range stack[:max(len(stack)-1, 0)] {
			out = append(out, f.at())
		}
		if last != nil {
			out = append(out, last)
		}
		return out
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, ""
		}
		// The token's raw bytes: the decoder has already replaced
		// invalid UTF-8 in tok, so validity is judged on the input.
		raw := body[prev:dec.InputOffset()]
		prev = dec.InputOffset()
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				stack = append(stack, &frame{object: d == '{', wantKey: d == '{'})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 {
					stack[len(stack)-1].next()
				}
			}
			continue
		}
		s, isString := tok.(string)
		if isString && top != nil && top.object && top.wantKey {
			if w := rawProblem(s, raw); w != "" {
				return path(s), "has a key that " + w
			}
			top.key, top.wantKey = s, false
			continue
		}
		if isString {
			if w := rawProblem(s, raw); w != "" {
				if top == nil {
					return nil, w
				}
				return path(top.at()), w
			}
		}
		if top != nil {
			top.next()
		}
	}
}

func rawProblem(s string, raw []byte) string {
	if !utf8.Valid(raw) {
		return "is not valid UTF-8 text"
	}
	return problem(s)
}

func (f *frame) at() any {
	if f.object {
		return f.key
	}
	return f.index
}

func (f *frame) next() {
	if f.object {
		f.wantKey = true
	} else {
		f.index++
	}
}

// join spells a path: keys joined with dots, indexes in brackets; a key
// that is itself the problem is quoted so it prints.
func join(field string, at []any) string {
	var b strings.Builder
	b.WriteString(field)
	for _, p := range at {
		switch x := p.(type) {
		case int:
			if b.Len() == 0 {
				b.WriteString("body")
			}
			b.WriteString("[" + strconv.Itoa(x) + "]")
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			if problem(x) != "" {
				x = strings.Trim(strconv.Quote(x), `"`)
			}
			b.WriteString(x)
		}
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

// patchField names the field a JSON patch op writes when the bad string
// is (within) its value: [{"op":"add","path":"/extra/foo","value":…}]
// names extra.foo. "" when body is not a patch or the string is elsewhere.
func patchField(body []byte, at []any) string {
	i, ok := at[0:min(1, len(at))], len(at) >= 2 && at[1] == "value"
	if !ok {
		return ""
	}
	idx, isIndex := i[0].(int)
	var ops []struct {
		Path string `json:"path"`
	}
	if !isIndex || json.Unmarshal(body, &ops) != nil || idx >= len(ops) || problem(ops[idx].Path) != "" {
		return ""
	}
	var parts []any
	for _, p := range strings.Split(strings.Trim(ops[idx].Path, "/"), "/") {
		p = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
		if n, err := strconv.Atoi(p); err == nil {
			parts = append(parts, n)
		} else {
			parts = append(parts, p)
		}
	}
	return join("", append(parts, at[2:]...))
}
