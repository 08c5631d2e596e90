// Package listing pages and sorts the lists of Ironic's smaller resources
// (chassis, deploy templates, volume connectors and targets) the one way
// Ironic does: limit, marker, sort_key, sort_dir, keyset paging with ties
// broken by id so pages never repeat or skip a row.
package listing

import (
	"fmt"
	"slices"
	"strings"

	entsql "entgo.io/ent/dialect/sql"

	"github.com/anvilproject/anvil/server/errs"
)

// MaxLimit bounds one page, as Ironic's api.max_limit.
const MaxLimit = 1000

// Options are a list request's paging and sorting.
type Options struct {
	Limit            int
	Marker           string
	SortKey, SortDir string
}

// Key is a sortable column; a nullable text column sorts as "" so both
// databases order and page it the same way.
type Key struct {
	Col      string
	Nullable bool
}

// Plan is a checked Options: the page size and the sort column.
type Plan struct {
	Limit int
	Key   Key
	Desc  bool
}

// Check validates o against the resource's sortable keys; keys lists
// them by API name, refused names (extra, steps) simply absent.
func Check(o Options, keys map[string]Key) (Plan, error) {
	p := Plan{Limit: o.Limit}
	if p.Limit <= 0 || p.Limit > MaxLimit {
		p.Limit = MaxLimit
	}
	switch o.SortDir {
	case "", "asc":
	case "desc":
		p.Desc = true
	default:
		return p, errs.BadRequest("sort_dir", "Invalid sort direction: %s. Acceptable values are 'asc' or 'desc'", o.SortDir)
	}
	name := o.SortKey
	if name == "" {
		name = "id"
	}
	k, ok := keys[name]
	if !ok {
		var names []string
		for n := range keys {
			names = append(names, n)
		}
		slices.Sort(names)
		return p, errs.BadRequest("sort_key", "The sort_key value %s is an invalid field for sorting; use one of %s", name, strings.Join(names, ", "))
	}
	p.Key = k
	return p, nil
}

func (p Plan) expr(sel *entsql.Selector) string {
	if p.Key.Nullable {
		return fmt.Sprintf("COALESCE(%s, '')", sel.C(p.Key.Col))
	}
	return sel.C(p.Key.Col)
}

// Order orders a query by the plan, then by id.
func (p Plan) Order(sel *entsql.Selector) {
	dir := ""
	if p.Desc {
		dir = " DESC"
	}
	sel.OrderExpr(entsql.Expr(p.expr(sel)+dir), entsql.Expr(sel.C("id")+dir))
}

// After is the keyset predicate for rows past the marker row, whose value
// in the sort column is val and whose id is id.
func (p Plan) After(val any, id int) func(*entsql.Selector) {
	return func(sel *entsql.Selector) {
		op := ">"
		if p.Desc {
			op = "<"
		}
		cmp := func(col, op string, v any) *entsql.Predicate {
			return entsql.P(func(b *entsql.Builder) { b.WriteString(col).WriteString(" " + op + " ").Arg(v) })
		}
		expr := p.expr(sel)
		sel.Where(entsql.Or(cmp(expr, op, val), entsql.And(cmp(expr, "=", val), cmp(sel.C("id"), op, id))))
	}
}
