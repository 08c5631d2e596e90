// Package patchdoc applies RFC 6902 JSON patches to a resource as a
// document of its fields, the one way every resource's PATCH works.
package patchdoc

import (
	"encoding/json"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/anvilproject/anvil/server/errs"
)

// Apply applies raw to doc and returns the patched document; what names the
// resource in errors ("node", "allocation"). Every failure is a 400.
func Apply(doc map[string]any, raw []byte, what string) (map[string]any, error) {
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, errs.BadRequest("patch", "invalid JSON patch: %v", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(b)
	if err != nil {
		return nil, errs.BadRequest("patch", "the patch cannot be applied: %v", err)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, errs.BadRequest("patch", "the patched %s is not an object: %v", what, err)
	}
	return res, nil
}

// Normal round-trips a value through JSON so that values read from the
// database compare equal to freshly decoded ones.
func Normal(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
