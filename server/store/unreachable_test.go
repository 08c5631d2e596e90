package store_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/anvilproject/anvil/server/store"
)

// TestUnreachable tells a database that went away from one that refused
// the statement: only the first is worth waiting out.
func TestUnreachable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("query: %w", syscall.ECONNREFUSED), true},
		{driver.ErrBadConn, true},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is shutting down"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}, true},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, false},
		{errors.New("sql: no rows in result set"), false},
		{nil, false},
	} {
		if got := store.Unreachable(c.err); got != c.want {
			t.Errorf("Unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// A real refused connection, as pgx reports it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := pgconn.Connect(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err == nil || !store.Unreachable(err) {
		t.Errorf("a refused connection: Unreachable(%v) is false", err)
	}
}
