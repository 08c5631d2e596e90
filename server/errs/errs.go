// Package errs is the small vocabulary of failures the service layer
// returns. Each carries the HTTP status the API and the portal answer
// with, so services stay free of HTTP while handlers stay one line.
package errs

import (
	"errors"
	"fmt"
)

// Error is a failure a caller can act on: its message says what was wrong
// and, where one field is to blame, names it.
type Error struct {
	Status int
	Field  string
	Msg    string
	locked bool // a 409 because another operation holds the node
}

func (e *Error) Error() string { return e.Msg }

func newf(status int, field, format string, a ...any) *Error {
	return &Error{Status: status, Field: field, Msg: fmt.Sprintf(format, a...)}
}

// BadRequest is a 400 about one field (field may be empty).
func BadRequest(field, format string, a ...any) *Error { return newf(400, field, format, a...) }

// Unauthorized is a 401: the caller did not prove who it is.
func Unauthorized(format string, a ...any) *Error { return newf(401, "", format, a...) }

// TooMany is a 429: the caller must slow down.
func TooMany(format string, a ...any) *Error { return newf(429, "", format, a...) }

// Forbidden is a 403: the caller may see the resource but not do this.
func Forbidden(format string, a ...any) *Error { return newf(403, "", format, a...) }

// NotFound is a 404; also what a caller who may not see a resource gets.
func NotFound(format string, a ...any) *Error { return newf(404, "", format, a...) }

// NotAcceptable is a 406, for features newer than the requested microversion.
func NotAcceptable(format string, a ...any) *Error { return newf(406, "", format, a...) }

// Conflict is a 409: a duplicate, a lock, or a state that forbids the action.
func Conflict(format string, a ...any) *Error { return newf(409, "", format, a...) }

// NodeLocked is Ironic's NodeLocked: a 409 because another operation
// holds the node's lock. holder names it ("host cond-1").
func NodeLocked(uuid, holder string) *Error {
	e := newf(409, "", "Node %s is locked by %s, please retry after the current operation is completed.", uuid, holder)
	e.locked = true
	return e
}

// IsLocked says whether err is a NodeLocked refusal, which a caller may
// retry once the holder is done.
func IsLocked(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.locked
}

// Unavailable is a 503: a dependency (database, BMC) did not answer.
func Unavailable(format string, a ...any) *Error { return newf(503, "", format, a...) }

// Status returns the HTTP status for err: its own for an *Error, else 500.
func Status(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 500
}

// FieldOf returns the field an error blames, if any.
func FieldOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Field
	}
	return ""
}
