package store

import (
	"context"

	entsql "entgo.io/ent/dialect/sql"
)

// Insert starts an INSERT into table in the store's dialect, for Upsert.
func (d *DB) Insert(table string) *entsql.InsertBuilder {
	return entsql.Dialect(d.Dialect).Insert(table)
}

// Upsert runs ins, one row, through ex (the store, or an ent client, a
// transaction's too), so that a row already holding its values in
// the unique columns conflict is kept as it is (replace false) or takes
// ins's other values (replace true), and reports whether a row was
// written (inserted, or with replace, updated). It is one statement (ON
// CONFLICT), so replicas racing on the same key neither fail nor, on
// PostgreSQL, abort the transaction they are in. It is written here
// rather than generated: ent's sql/upsert feature made typed upserts for
// every table, 2 MiB of code that every process mapped (docs/memory.md),
// for the three tables that use one. Ent's defaults, validators and JSON
// encoding are not applied: callers pass every column they need,
// validated.
func Upsert(ctx context.Context, ex entsql.ExecQuerier, ins *entsql.InsertBuilder, replace bool, conflict ...string) (bool, error) {
	action := entsql.DoNothing()
	if replace {
		action = entsql.ResolveWithNewValues()
	}
	q, args := ins.OnConflict(entsql.ConflictColumns(conflict...), action).Query()
	res, err := ex.ExecContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
