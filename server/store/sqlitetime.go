package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	entsql "entgo.io/ent/dialect/sql"
)

// sqliteTimeFormat is how times are written to SQLite (the driver's
// _time_format=sqlite): the modernc driver's default is time.String,
// whose " m=+0.0123" monotonic suffix made a stored time sort after the
// same time read back and sent as a marker, so a list sorted by
// created_at repeated its marker row on every page.
const sqliteTimeFormat = "2006-01-02 15:04:05.999999999-07:00"

// goTimeString is time.String's layout without the monotonic reading.
const goTimeString = "2006-01-02 15:04:05.999999999 -0700 MST"

// rewriteSQLiteTimes rewrites every datetime value an earlier release
// stored in time.String's form into sqliteTimeFormat, so old and new rows
// compare and sort as times. Rows already rewritten are not matched, so
// it costs one scan per datetime column at start.
func rewriteSQLiteTimes(ctx context.Context, db entsql.ExecQuerier) error {
	rows, err := db.QueryContext(ctx, `SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p
		WHERE m.type = 'table' AND lower(p.type) = 'datetime'`)
	if err != nil {
		return err
	}
	type col struct{ table, name string }
	var cols []col
	for rows.Next() {
		var c col
		if err := rows.Scan(&c.table, &c.name); err != nil {
			rows.Close()
			return err
		}
		cols = append(cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range cols {
		if err := rewriteColumn(ctx, db, c.table, c.name); err != nil {
			return fmt.Errorf("%s.%s: %w", c.table, c.name, err)
		}
	}
	return nil
}

func rewriteColumn(ctx context.Context, db entsql.ExecQuerier, table, column string) error {
	// time.String writes the zone's name after its offset, which the
	// stored form has not: " +0000 UTC".
	// "|| ''" reads the text as stored: the driver would parse a
	// datetime column and database/sql reformat it.
	q := fmt.Sprintf(`SELECT rowid, %q || '' FROM %q WHERE typeof(%q) = 'text' AND %q GLOB '* [+-][0-9][0-9][0-9][0-9] *'`, column, table, column, column)
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	fixed := map[int64]string{}
	for rows.Next() {
		var id int64
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			rows.Close()
			return err
		}
		v, _, _ = strings.Cut(v, " m=")
		t, err := time.Parse(goTimeString, v)
		if err != nil {
			rows.Close()
			return fmt.Errorf("row %d holds %q, not a time: %w", id, v, err)
		}
		fixed[id] = t.Format(sqliteTimeFormat)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for id, v := range fixed {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE %q SET %q = ? WHERE rowid = ?`, table, column), v, id); err != nil {
			return err
		}
	}
	return nil
}
