package runbooks

import (
	"encoding/json"
	"strconv"
	"strings"
)

// ReadsSecret reports whether a JSON-patch operation that reads src
// (copy or move from it, test against it) in doc, a runbook's or deploy
// template's stored document, would read a secret step argument: src
// names one, or names the steps, a step or an args object that holds
// one. Patches work on the stored arguments, secrets included, so such a
// read could carry a password into extra or the name, or probe it with
// test; a secret can only be replaced or removed.
func ReadsSecret(doc any, src string) bool {
	if !strings.HasPrefix(src, "/steps") {
		return false
	}
	if IsSecret(src) {
		return true
	}
	// Resolve on the document as JSON sees it: typed steps become maps.
	raw, err := json.Marshal(doc)
	if err != nil {
		return true
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return true
	}
	for _, part := range strings.Split(strings.TrimPrefix(src, "/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(x) {
				return false
			}
			v = x[i]
		default:
			return false
		}
	}
	return holdsSecret(v)
}

func holdsSecret(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if IsSecret(k) || holdsSecret(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if holdsSecret(e) {
				return true
			}
		}
	}
	return false
}
