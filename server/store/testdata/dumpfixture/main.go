// Command dumpfixture writes a SQLite database's rows as INSERT statements
// that load on both SQLite and PostgreSQL, for the upgrade fixtures under
// server/store/testdata (see make.sh there):
//
//	go run ./server/store/testdata/dumpfixture OLD.db > data.sql
//
// Tables come in foreign-key order, parents first. Booleans are written
// TRUE/FALSE (SQLite stores 0/1, which PostgreSQL refuses for boolean),
// and bytes as text, which both read back as the same bytes; a byte value
// that is not plain printable text (PostgreSQL would read a backslash as
// an escape) is refused rather than written wrong.
package main

import (
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"entgo.io/ent/dialect/sql/schema"
	"entgo.io/ent/schema/field"
	_ "modernc.org/sqlite"

	"github.com/anvilproject/anvil/server/store/baseline"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dumpfixture SQLITE.db > data.sql")
		os.Exit(2)
	}
	if err := dump(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "dumpfixture:", err)
		os.Exit(1)
	}
}

func dump(path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, t := range ordered(baseline.Tables) {
		cols := make([]string, len(t.Columns))
		quoted := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			cols[i] = `"` + c.Name + `"`
			quoted[i] = `quote("` + c.Name + `")`
		}
		rows, err := db.Query(`SELECT ` + strings.Join(quoted, ", ") + ` FROM "` + t.Name + `" ORDER BY rowid`)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		vals := make([]string, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return fmt.Errorf("%s: %w", t.Name, err)
			}
			for i, c := range t.Columns {
				if vals[i], err = literal(c, vals[i]); err != nil {
					rows.Close()
					return fmt.Errorf("%s.%s: %w", t.Name, c.Name, err)
				}
			}
			fmt.Printf("INSERT INTO \"%s\" (%s) VALUES (%s);\n", t.Name, strings.Join(cols, ", "), strings.Join(vals, ", "))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	return nil
}

// literal turns SQLite's quote() of a value into a literal both
// databases read as that value.
func literal(c *schema.Column, q string) (string, error) {
	switch {
	case q == "NULL":
		return q, nil
	case c.Type == field.TypeBool:
		switch q {
		case "0":
			return "FALSE", nil
		case "1":
			return "TRUE", nil
		}
		return "", fmt.Errorf("boolean stored as %s", q)
	case strings.HasPrefix(q, "X'"):
		b, err := hex.DecodeString(strings.TrimSuffix(strings.TrimPrefix(q, "X'"), "'"))
		if err != nil {
			return "", err
		}
		for _, r := range string(b) {
			if r < ' ' || r > '~' || r == '\\' {
				return "", fmt.Errorf("bytes %q are not plain text", b)
			}
		}
		return "'" + strings.ReplaceAll(string(b), "'", "''") + "'", nil
	}
	return q, nil
}

// ordered lists tables with each after the tables its foreign keys name.
func ordered(tables []*schema.Table) []*schema.Table {
	var out []*schema.Table
	seen := map[string]bool{}
	var visit func(t *schema.Table)
	visit = func(t *schema.Table) {
		if seen[t.Name] {
			return
		}
		seen[t.Name] = true
		for _, fk := range t.ForeignKeys {
			visit(fk.RefTable)
		}
		out = append(out, t)
	}
	for _, t := range tables {
		visit(t)
	}
	return out
}
