package agent

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/anvilproject/anvil/server/urlsafe"
)

// maxSaid bounds how much of the agent's own words an error carries:
// enough for a traceback's last line, not a whole log.
const maxSaid = 1000

// ErrNoCommand: the agent's command list has no command of that name
// (it never ran there, or the agent restarted and forgot it).
var ErrNoCommand = errors.New("the agent has no record of the command")

// ConnectionError: the agent could not be reached or did not answer in
// time (Ironic's AgentConnectionFailed). Retrying may help.
type ConnectionError struct {
	Node, What string
	detail     string // masked
	err        error  // for errors.Is: ErrNetwork, context deadlines
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("node %s: %s: the agent did not answer: %s", e.Node, e.What, e.detail)
}

func (e *ConnectionError) Unwrap() error { return e.err }

// APIError: the agent's API refused the request (Ironic's AgentAPIError):
// a bad token (401), a busy agent (409), an unknown command (400/404).
type APIError struct {
	Node, What string
	Status     int
	Message    string // the agent's faultstring, masked and truncated
}

func (e *APIError) Error() string {
	return fmt.Sprintf("node %s: %s: the agent answered HTTP %d: %s", e.Node, e.What, e.Status, e.Message)
}

// Busy tells whether the agent refused because another command is still
// running (Ironic's AgentInProgress): the caller retries later.
func (e *APIError) Busy() bool { return e.Status == http.StatusConflict }

// CommandError: the command ran and FAILED in the agent. Type and
// Message are the agent's error class and text (e.g. ImageChecksumError),
// masked and truncated.
type CommandError struct {
	Node, Command string
	Type, Message string
}

func (e *CommandError) Error() string {
	if e.Type == "" {
		return fmt.Sprintf("node %s: agent command %s failed: %s", e.Node, e.Command, e.Message)
	}
	return fmt.Sprintf("node %s: agent command %s failed: %s: %s", e.Node, e.Command, e.Type, e.Message)
}

// clean masks what an agent's text or a Go error may quote: the token,
// and credentials in URLs (a signed image URL, a password in userinfo);
// then truncates.
func (c *Client) clean(s string) string {
	if c.token != "" {
		s = strings.ReplaceAll(s, c.token, urlsafe.Hidden)
	}
	s = urlsafe.Text(s)
	if len(s) > maxSaid {
		s = s[:maxSaid] + "…"
	}
	return s
}
