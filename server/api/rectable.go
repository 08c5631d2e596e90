package api

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/listing"
)

// recField is one field of a smaller resource's JSON (chassis, deploy
// templates, volume connectors and targets) with the microversion that
// introduced it and how to read it.
type recField[T any] struct {
	name  string
	since Version
	value func(T) any
}

// recTable is a resource's field table, in Ironic's field order.
type recTable[T any] []recField[T]

// parse reads ?fields=, refusing unknown fields and fields newer than v.
func (t recTable[T]) parse(raw string, v Version) ([]string, error) {
	var out, bad []string
	for f := range strings.SplitSeq(raw, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if i := slices.IndexFunc(t, func(x recField[T]) bool { return x.name == f }); i < 0 || t[i].since > v {
			bad = append(bad, f)
			continue
		}
		out = append(out, f)
	}
	if len(bad) > 0 {
		return nil, errs.BadRequest("fields", "Field(s) %q are not valid for this API version", strings.Join(bad, ","))
	}
	return out, nil
}

// render writes x with the fields asked for (all when only is nil) that
// v knows, plus links.
func (t recTable[T]) render(x T, only []string, v Version, links []fiber.Map) fiber.Map {
	m := fiber.Map{"links": links}
	for _, f := range t {
		if f.since <= v && (only == nil || slices.Contains(only, f.name)) {
			m[f.name] = f.value(x)
		}
	}
	return m
}

func resLinks(c *fiber.Ctx, path string) []fiber.Map {
	b := baseURL(c)
	return []fiber.Map{link(b+"/v1/"+path, "self"), link(b+"/"+path, "bookmark")}
}

func strOrNil(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func stamp(t time.Time) any { return t.UTC().Format("2006-01-02T15:04:05.000000+00:00") }

func stampp(t *time.Time) any {
	if t == nil {
		return nil
	}
	return stamp(*t)
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// resListQuery is what every list of a smaller resource accepts.
var resListQuery = []string{"detail", "fields", "limit", "marker", "sort_key", "sort_dir"}

// resList reads a list request's paging and field selection: the default
// fields unless ?detail=true (from detailSince) or ?fields= (from
// fieldsSince); detail forces every field, as /detail does.
func resList[T any](c *fiber.Ctx, t recTable[T], defaults []string, detail bool, fieldsSince, detailSince Version) (listing.Options, []string, error) {
	v := ver(c)
	o := listing.Options{Marker: c.Query("marker"), SortKey: c.Query("sort_key"), SortDir: c.Query("sort_dir")}
	if s := c.Query("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return o, nil, errs.BadRequest("limit", "Limit must be positive, not %q", s)
		}
		o.Limit = n
	}
	if d := c.Query("detail"); d != "" {
		if detail {
			return o, nil, errs.BadRequest("detail", "detail cannot be combined with /detail")
		}
		if v < detailSince {
			return o, nil, errs.BadRequest("detail", "Invalid query parameter ?detail=%s received.", d)
		}
		var err error
		if detail, err = strconv.ParseBool(d); err != nil {
			return o, nil, errs.BadRequest("detail", "detail must be true or false, not %q", d)
		}
	}
	raw := c.Query("fields")
	switch {
	case raw != "" && detail:
		return o, nil, errs.BadRequest("fields", "Can not specify ?detail=True and fields in the same request.")
	case raw != "":
		if v < fieldsSince {
			return o, nil, errs.NotAcceptable("fields requires API version %s or later", fieldsSince)
		}
		fs, err := t.parse(raw, v)
		return o, fs, err
	case detail:
		return o, nil, nil
	}
	return o, defaults, nil
}

// resFieldsOne reads ?fields= on a show.
func resFieldsOne[T any](c *fiber.Ctx, t recTable[T], fieldsSince Version) ([]string, error) {
	raw := c.Query("fields")
	if raw == "" {
		return nil, nil
	}
	if ver(c) < fieldsSince {
		return nil, errs.NotAcceptable("fields requires API version %s or later", fieldsSince)
	}
	return t.parse(raw, ver(c))
}

// sendList writes {key: items, next: url} with next only when more follow.
func sendList(c *fiber.Ctx, key string, items []fiber.Map, more bool, lastUUID string) error {
	res := fiber.Map{key: items}
	if more {
		res["next"] = nextURL(c, lastUUID)
	}
	return c.JSON(res)
}
