package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/ports"
)

// resField is one field of a sub-resource's JSON (ports, portgroups): the
// microversion that introduced it and its value.
type resField[T any] struct {
	name  string
	since Version
	val   func(T) any
}

// resTable is a resource's fields in Ironic's order and what a list
// without detail shows.
type resTable[T any] struct {
	fields   []resField[T]
	defaults []string
	// path is the collection under /v1 ("ports").
	path string
	// shardSince is the version of the ?shard= filter: 1.82 on ports,
	// 1.106 on portgroups.
	shardSince Version
	uuid       func(T) string
	// more writes fields that are links, such as a portgroup's ports,
	// named moreName in ?fields=.
	more     func(w *jw, v T, self, bookmark string)
	moreName string
}

// selMore in a selection stands for the fields more writes: shown with
// everything and when ?fields= names them, not in a list's defaults, as
// Ironic's sanitize_dict keeps only the fields asked for.
const selMore = -1

// selectFields reads ?fields=: an unknown field is a 400, a field newer
// than the request's version a 406, as Ironic answers. With no ?fields=
// a list shows the defaults (or everything with detail), a show
// everything the version allows.
func (t *resTable[T]) selectFields(raw string, v Version, list, detail bool) ([]int, error) {
	if raw != "" && detail {
		return nil, errs.BadRequest("fields", "Can not specify ?detail=True and fields in the same request.")
	}
	var names []string
	switch {
	case raw != "":
		if v < VerFields {
			return nil, errs.NotAcceptable("fields requires API version %s or later", VerFields)
		}
		names = strings.Split(raw, ",")
	case list && !detail:
		names = t.defaults
	}
	if names == nil {
		var out []int
		if t.more != nil {
			out = append(out, selMore)
		}
		for i, f := range t.fields {
			if f.since <= v {
				out = append(out, i)
			}
		}
		return out, nil
	}
	var out []int
	var badNames []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		i := slices.IndexFunc(t.fields, func(f resField[T]) bool { return f.name == n })
		switch {
		case n == "":
		case t.more != nil && n == t.moreName:
			if !slices.Contains(out, selMore) {
				out = append(out, selMore)
			}
		case i < 0:
			badNames = append(badNames, n)
		case t.fields[i].since > v:
			return nil, errs.NotAcceptable("field %s requires API version %s or later", n, t.fields[i].since)
		case !slices.Contains(out, i):
			out = append(out, i)
		}
	}
	if len(badNames) > 0 {
		return nil, errs.BadRequest("fields", "Field(s) %q are not valid", strings.Join(badNames, ","))
	}
	slices.Sort(out)
	return out, nil
}

func (t *resTable[T]) write(w *jw, v T, sel []int, base string) {
	w.open()
	for _, i := range sel {
		if i == selMore {
			continue
		}
		f := t.fields[i]
		switch x := f.val(v).(type) {
		case *time.Time:
			w.time(f.name, x)
		case time.Time:
			w.time(f.name, &x)
		default:
			w.any(f.name, x)
		}
	}
	id := t.uuid(v)
	self, bookmark := base+"/v1/"+t.path+"/"+id, base+"/"+t.path+"/"+id
	if t.more != nil && slices.Contains(sel, selMore) {
		t.more(w, v, self, bookmark)
	}
	w.links(self, bookmark)
	w.close()
}

func (t *resTable[T]) send(c *fiber.Ctx, v T, sel []int, status int) error {
	w := &jw{b: make([]byte, 0, 1024)}
	t.write(w, v, sel, baseURL(c))
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(status).Send(w.b)
}

func (t *resTable[T]) sendList(c *fiber.Ctx, key string, vs []T, sel []int, more bool) error {
	w := &jw{b: make([]byte, 0, 256+len(vs)*len(sel)*48)}
	w.b = append(w.b, `{"`+key+`":[`...)
	base := baseURL(c)
	for i, v := range vs {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		t.write(w, v, sel, base)
	}
	w.b = append(w.b, ']')
	if more && len(vs) > 0 {
		w.b = append(w.b, `,"next":`...)
		w.b = appendString(w.b, nextURL(c, t.uuid(vs[len(vs)-1])))
	}
	w.b = append(w.b, '}')
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(w.b)
}

// sinceOf returns the version a field appeared in, for gating PATCH and
// POST bodies and sort keys: a client may not set or sort by what it
// cannot see.
func (t *resTable[T]) sinceOf(name string) Version {
	for _, f := range t.fields {
		if f.name == name {
			return f.since
		}
	}
	return VerMin
}

func (t *resTable[T]) gate(v Version) func(string) error {
	return func(name string) error {
		if since := t.sinceOf(name); since > v {
			return errs.NotAcceptable("field %s requires API version %s or later; the request asked for %s", name, since, v)
		}
		return nil
	}
}

// listOpts reads a port or portgroup list's shared parameters. Filters
// of features newer than the version, or not in Anvil, are refused with
// the reason rather than ignored.
func (t *resTable[T]) listOpts(c *fiber.Ctx, v Version, detail bool) (ports.ListOptions, []int, error) {
	var o ports.ListOptions
	// Ironic gates only the shard filter by version; it applies
	// ?description_contains= and ?conductor_groups= at every version.
	if c.Query("shard") != "" {
		if err := requireVersion(v, t.shardSince, "the shard filter"); err != nil {
			return o, nil, err
		}
	}
	if d := c.Query("detail"); d != "" {
		if detail {
			return o, nil, errs.BadRequest("detail", "detail cannot be combined with /%s/detail", t.path)
		}
		b, err := strconv.ParseBool(d)
		if err != nil {
			return o, nil, errs.BadRequest("detail", "detail must be true or false, not %q", d)
		}
		if err := requireVersion(v, VerDetailQuery, "the detail parameter"); err != nil {
			return o, nil, err
		}
		detail = b
	}
	sel, err := t.selectFields(c.Query("fields"), v, true, detail)
	if err != nil {
		return o, nil, err
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			return o, nil, errs.BadRequest("limit", "limit must be a non-negative integer, not %q", l)
		}
		o.Limit = n
	}
	o.Marker, o.SortKey, o.SortDir = c.Query("marker"), c.Query("sort_key"), c.Query("sort_dir")
	if o.SortKey != "" {
		if err := t.gate(v)(o.SortKey); err != nil {
			return o, nil, err
		}
	}
	if a := c.Query("address"); a != "" {
		o.Address = &a
	}
	if sh := c.Query("shard"); sh != "" {
		for x := range strings.SplitSeq(sh, ",") {
			if x = strings.TrimSpace(x); x != "" {
				o.Shards = append(o.Shards, x)
			}
		}
		// As Ironic: a shard filter excludes a parent node or portgroup,
		// and on portgroups an address too.
		if c.Query("node") != "" || c.Query("node_uuid") != "" || c.Query("portgroup") != "" || c.Params("node") != "" || c.Params("pg") != "" ||
			(t.path == "portgroups" && c.Query("address") != "") {
			return o, nil, errs.BadRequest("shard", "Filtering by node, address, or shard simultaneously is not supported.")
		}
	}
	if d := c.Query("description_contains"); d != "" {
		o.DescriptionContains = &d
	}
	if cg := c.Query("conductor_groups"); cg != "" {
		// Node conductor groups are stored lower-case, and Ironic's
		// MySQL compares them without case: lower-casing the filter
		// gives that answer on both databases.
		for x := range strings.SplitSeq(cg, ",") {
			o.ConductorGroups = append(o.ConductorGroups, strings.ToLower(strings.TrimSpace(x)))
		}
		// As Ironic: on ports the filter excludes a node, portgroup or
		// address; on portgroups it is one of the exclusive node,
		// address and shard filters.
		if t.path == "ports" && (c.Query("node") != "" || c.Query("node_uuid") != "" || c.Query("portgroup") != "" ||
			c.Query("address") != "" || c.Params("node") != "" || c.Params("pg") != "") {
			return o, nil, errs.BadRequest("conductor_groups", "Filtering by conductor_groups cannot be combined with node_ident, portgroup_ident, or node address filters.")
		}
		if t.path == "portgroups" && (c.Query("node") != "" || c.Params("node") != "" || c.Query("address") != "" || c.Query("shard") != "") {
			return o, nil, errs.BadRequest("conductor_groups", "Filtering by node, address, or shard simultaneously is not supported.")
		}
	}
	return o, sel, nil
}

func optString(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// optBool is a boolean in a create body that Ironic's schema also takes
// as a string ("true", "no"), as the baremetal CLI sends --pxe-enabled.
type optBool struct{ v *bool }

func (b *optBool) UnmarshalJSON(raw []byte) error {
	var x any
	if err := json.Unmarshal(raw, &x); err != nil {
		return err
	}
	switch v := x.(type) {
	case nil:
		b.v = nil
		return nil
	case bool:
		b.v = &v
		return nil
	case string:
		if t, ok := ports.ParseBool(v); ok {
			b.v = &t
			return nil
		}
	}
	return &json.UnmarshalTypeError{Value: string(raw), Type: reflect.TypeFor[bool]()}
}
