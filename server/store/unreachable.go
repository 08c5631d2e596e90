package store

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err says the database could not be reached
// or went away mid-statement (a restart, a failover, a dropped
// connection, no connection slot free) rather than refused the
// statement: worth retrying once the database is back. An error from
// COMMIT itself leaves the outcome unknown; the conductor's writes are
// idempotent UPDATEs, so a retry at worst repeats a history event.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		// 08: connection exception; 57P01-03: administrator or crash
		// shutdown, or the server not yet accepting connections; 53300:
		// too many connections, which frees up as others close.
		return strings.HasPrefix(pg.Code, "08") || pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03" || pg.Code == "53300"
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connect), errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgx reports a connection its pool already closed only in words.
	return strings.Contains(err.Error(), "conn closed")
}
