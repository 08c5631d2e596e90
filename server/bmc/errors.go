package bmc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stmcginnis/gofish/common"
)

// Kinds of BMC failure; every *Error wraps exactly one, so callers decide
// with errors.Is and people read Summary.
var (
	ErrAuth        = errors.New("the BMC refused the credentials")
	ErrUnreachable = errors.New("the BMC did not answer")
	ErrTLS         = errors.New("the BMC's TLS certificate was not accepted")
	ErrBMC         = errors.New("the BMC answered with an error")
	ErrUnsupported = errors.New("the operation is not supported by this BMC")
	// ErrPowerTimeout: the BMC took the command but never reported the
	// target state before the deadline.
	ErrPowerTimeout = errors.New("the BMC did not reach the requested power state in time")
	// ErrNetwork: the address is outside the BMC networks Anvil may reach.
	ErrNetwork = errors.New("the BMC address is outside the allowed BMC networks")
)

// Error is a classified BMC failure. Summary carries only Anvil's own
// words: no address, dial error, nor any text the other end sent, since
// a BMC address may name any host and whoever set it must not read that
// host through the node. Error() adds them for operators.
type Error struct {
	Op     string // "setting power on"
	Kind   error  // one of the Err* kinds above
	Where  string // host:port
	Reason string // short fixed words shown with the kind: "unreachable", "timeout"
	// Status is the HTTP status the BMC answered with, 0 for none.
	Status int
	// Message is Anvil's own wording of what went wrong, safe for the
	// summary; never text the BMC sent.
	Message string
	// Said is what the BMC (or whatever answered) said, credentials
	// masked: for operators only.
	Said string
	// Detail is the underlying error text, credentials masked.
	Detail string
	// Tries and Timeout are, for a BMC that did not answer, how many
	// times the call was made and how long each waited: the summary says
	// them, so a failure names the real wait rather than a default.
	Tries   int
	Timeout time.Duration
}

func (e *Error) Error() string {
	s := e.Op
	if e.Where != "" {
		s += " at " + e.Where
	}
	s += ": " + e.summary()
	if e.Said != "" {
		s += ": " + e.Said
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Kind }

func (e *Error) summary() string {
	s := e.Kind.Error()
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d from the BMC)", e.Status)
	}
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Tries > 0 {
		tries := "tries"
		if e.Tries == 1 {
			tries = "try"
		}
		s += fmt.Sprintf(" after %d %s of %s s each", e.Tries, tries, strconv.FormatFloat(e.Timeout.Seconds(), 'f', -1, 64))
	}
	return s
}

// Summary is err's text without addresses or dial details: what a
// project-scoped caller may see. Errors that are not BMC errors pass
// through unchanged.
func Summary(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.summary()
	}
	// Other failures that reach into a network keep their detail for
	// system scope the same way.
	var s interface{ Summary() string }
	if errors.As(err, &s) {
		return s.Summary()
	}
	return err.Error()
}

// Class is a BMC failure's kind for programs: history keeps it beside
// the summary, so pages tell failures apart without reading the text.
// It holds only Anvil's fixed words and the HTTP status.
type Class struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason,omitempty"`
	Status int    `json:"status,omitempty"`
}

// kindNames are the Class kinds of the Err* kinds.
var kindNames = map[error]string{
	ErrAuth: "auth", ErrUnreachable: "unreachable", ErrTLS: "tls", ErrBMC: "bmc",
	ErrUnsupported: "unsupported", ErrPowerTimeout: "power_timeout", ErrNetwork: "network",
}

// ClassOf is err's class when it is a BMC failure.
func ClassOf(err error) (Class, bool) {
	var e *Error
	if !errors.As(err, &e) {
		return Class{}, false
	}
	return Class{Kind: kindNames[e.Kind], Reason: e.Reason, Status: e.Status}, true
}

// Retryable reports whether trying again could help: only a BMC that did
// not answer, never refused credentials, bad certificates or refusals.
func Retryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == ErrUnreachable
}

// classify turns a transport or protocol failure into an *Error. It
// decides by the error's type, not its text, where types exist.
func classify(op, where string, err error, secrets []string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e // already classified: never wrap twice
	}
	// gofish gathers a collection's failures into one error that does
	// not unwrap: without a redfish_system_id the system list is read
	// this way, and a refused password must still read as a refusal.
	var coll *common.CollectionError
	if errors.As(err, &coll) && len(coll.Failures) > 0 {
		return classify(op, where, firstFailure(coll), secrets)
	}
	out := &Error{Op: op, Where: where, Kind: ErrUnreachable, Detail: truncate(mask(err.Error(), secrets), 300)}
	var (
		rf       *common.Error
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		recordH  tls.RecordHeaderError
		netErr   net.Error
		dnsErr   *net.DNSError
		opErr    *net.OpError
	)
	switch {
	case errors.Is(err, ErrNetwork):
		out.Kind = ErrNetwork
	case errors.As(err, &rf) && rf.HTTPReturnedStatusCode != 0:
		out.Status = rf.HTTPReturnedStatusCode
		switch out.Status {
		case 401, 403:
			out.Kind = ErrAuth
		case 404, 405, 501:
			out.Kind = ErrUnsupported
		default:
			out.Kind = ErrBMC
		}
		// What answered is kept for operators only, a Redfish message as
		// much as any other body: a BMC address pointed at some other
		// service must not read that service through the summary.
		out.Detail = ""
		if msg := redfishMessage(rf); msg != "" {
			out.Said = truncate(mask(msg, secrets), 200)
		} else {
			out.Said = truncate(mask(strings.Join(strings.Fields(rf.Error()), " "), secrets), 300)
		}
	case errors.As(err, &hostname):
		out.Kind, out.Reason = ErrTLS, "issued for another name"
	case errors.As(err, &unknown), errors.As(err, &verify) && errors.As(verify.Err, &unknown):
		out.Kind, out.Reason = ErrTLS, "signed by an unknown authority; set driver_info/redfish_verify_ca to its CA bundle, or false"
	case errors.As(err, &invalid), errors.As(err, &verify):
		out.Kind, out.Reason = ErrTLS, "invalid certificate"
	case errors.As(err, &recordH), strings.Contains(err.Error(), plainHTTP):
		out.Kind, out.Reason = ErrTLS, "the BMC does not speak TLS there; use an http:// address"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		out.Reason = "timeout"
	case errors.As(err, &dnsErr):
		out.Reason = "name not resolved"
	case errors.As(err, &opErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		out.Reason = "unreachable"
	default:
		// The BMC answered something nobody understood: say so rather
		// than claim it was silent.
		out.Kind, out.Reason = ErrBMC, "unexpected answer"
	}
	return out
}

// firstFailure is the collection's failure that says most: an HTTP
// answer before a transport error, then by link so the choice is the
// same every time.
func firstFailure(coll *common.CollectionError) error {
	links := slices.Sorted(maps.Keys(coll.Failures))
	for _, l := range links {
		var rf *common.Error
		if errors.As(coll.Failures[l], &rf) && rf.HTTPReturnedStatusCode != 0 {
			return coll.Failures[l]
		}
	}
	return coll.Failures[links[0]]
}

// plainHTTP is net/http's error for a TLS handshake answered in plain
// HTTP; the transport turns the typed record-header error into this text.
const plainHTTP = "server gave HTTP response to HTTPS client"

// redfishMessage picks the BMC's own words from a Redfish error body;
// "" when the body is not one (gofish then copies the raw body into
// Message, with no Code).
func redfishMessage(rf *common.Error) string {
	if rf.Code == "" && len(rf.ExtendedInfos) == 0 {
		return ""
	}
	for _, x := range rf.ExtendedInfos {
		if x.Message != "" {
			return x.Message
		}
	}
	return rf.Message
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// mask replaces each credential where it stands as a whole token, not
// inside other words: a password "occ" must not turn "occurred" into
// "******urred".
func mask(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec == "" {
			continue
		}
		re := regexp.MustCompile(`(^|[^\pL\pN_])` + regexp.QuoteMeta(sec) + `([^\pL\pN_]|$)`)
		// Twice: adjacent matches share their separator, and one pass
		// skips every second one.
		for range 2 {
			s = re.ReplaceAllString(s, "${1}******${2}")
		}
	}
	return s
}
