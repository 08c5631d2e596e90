package conductor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/bmc"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/history"
	"github.com/anvilproject/anvil/server/nodes"
)

// Rules of the console endpoints, named as Ironic names them.
const (
	RuleGetConsole = "baremetal:node:get_console"
	RuleSetConsole = "baremetal:node:set_console_state"
)

// Console implementations Anvil drives. fake is Ironic's: enabling it
// only records console_enabled. ipmitool-socat is a TCP listener in the
// conductor standing in for Ironic's socat process: each connection runs
// "ipmitool sol activate" with the node's credentials.
const (
	ConsoleFake   = "fake"
	ConsoleSocat  = "ipmitool-socat"
	consoleEvents = "console"
)

// Keys of driver_internal_info a running ipmitool-socat console keeps:
// the port (Ironic's key), the URL clients are given and the conductor
// that listens, so that after a restart only that conductor reopens it.
const (
	internalConsolePort = "allocated_ipmi_terminal_port"
	internalConsoleURL  = "console_url"
	internalConsoleHost = "console_conductor"
)

// ConsoleConfig places the ipmitool-socat listeners, as Ironic's
// [console]socat_address and port_range.
type ConsoleConfig struct {
	// Host is the address the listeners bind and their URLs name.
	Host string
	// PortMin..PortMax is the range a node without
	// driver_info/ipmi_terminal_port takes a port from; 0 for none.
	PortMin, PortMax int
}

// ParsePortRange reads Ironic's <start>:<end> port range.
func ParsePortRange(s string) (lo, hi int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, ":")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("%q: give <start>:<end>, ports from 1 to 65535, such as 10000:20000", s)
	}
	return lo, hi, nil
}

// consoles are the ipmitool-socat listeners this conductor runs, by
// node id.
type consoles struct {
	mu   sync.Mutex
	open map[int]*consoleSession
}

// consoleSession is one node's listener and the client it serves.
type consoleSession struct {
	port   int
	url    string
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// ConsoleState is GET states/console: console_info is nil while the
// console is off, as Ironic answers.
func (o *Ops) ConsoleState(ctx context.Context, ident string) (bool, map[string]any, error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleGetConsole)
	if err != nil {
		return false, nil, err
	}
	if !n.ConsoleEnabled {
		return false, nil, nil
	}
	if err := o.C.checkConsole(n); err != nil {
		return false, nil, err
	}
	if consoleInterface(n) == ConsoleSocat {
		url, _ := n.DriverInternalInfo[internalConsoleURL].(string)
		return true, map[string]any{"type": "socat", "url": url}, nil
	}
	// Ironic's fake console answers an empty description.
	return true, map[string]any{}, nil
}

// SetConsole starts enabling or disabling the console (PUT
// states/console): it checks the interface can, then locks the node and
// does it in the background; a failure is the node's last_error.
func (o *Ops) SetConsole(ctx context.Context, ident string, enabled bool) (err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleSetConsole)
	if err != nil {
		return err
	}
	defer func() { o.Guard.Done(ctx, RuleSetConsole, "node", n.UUID, err, map[string]any{"enabled": enabled}) }()
	c := o.C
	if err := c.checkConsole(n); err != nil {
		return err
	}
	if enabled == n.ConsoleEnabled {
		// As Ironic: nothing to do is still accepted.
		return nil
	}
	if err := c.lock(ctx, n.ID); err != nil {
		return err
	}
	who := actor(ctx)
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		defer c.unlock(n.ID)
		c.setConsole(context.WithoutCancel(c.ctx), n, enabled, who)
	}()
	return nil
}

// consoleInterface is the node's console implementation as the API shows
// it: the one it stores, else its driver's default (fake-hardware's is
// fake), so a node imported without interfaces has the console GET
// reports rather than none.
func consoleInterface(n *ent.Node) string {
	return (&nodes.View{Node: n}).Interface("console")
}

// checkConsole refuses an interface without a console and a console
// that cannot be given a port, with Ironic's words (400).
func (c *Conductor) checkConsole(n *ent.Node) error {
	switch consoleInterface(n) {
	case ConsoleFake:
		return nil
	case ConsoleSocat:
		if v, _ := n.DriverInfo["ipmi_protocol_version"].(string); v == "1.5" {
			return errs.BadRequest("driver_info/ipmi_protocol_version", "Serial over lan only works with IPMI protocol version 2.0. Check the 'ipmi_protocol_version' parameter in node's driver_info")
		}
		if _, ok := n.DriverInfo["ipmi_terminal_port"]; !ok && c.cfg.Console.PortMin == 0 {
			return errs.BadRequest("driver_info/ipmi_terminal_port", "Either missing 'ipmi_terminal_port' parameter in node's driver_info or the conductor's --console-port-range is not configured")
		}
		return nil
	}
	// Ironic's UnsupportedDriverExtension, then which field decides.
	return errs.BadRequest("console_interface", "Driver %s does not support console (disabled or not implemented). console_interface %q has no console.", n.Driver, consoleInterface(n))
}

// setConsole does the change under the node's lock and records it.
func (c *Conductor) setConsole(ctx context.Context, n *ent.Node, enabled bool, who string) {
	info := cloneInfo(n.DriverInternalInfo)
	msg := "Console disabled"
	var err error
	if enabled {
		msg = "Console enabled"
		if consoleInterface(n) == ConsoleSocat {
			var s *consoleSession
			if s, err = c.openConsole(n); err == nil {
				info[internalConsolePort], info[internalConsoleURL], info[internalConsoleHost] = s.port, s.url, c.cfg.Name
				msg += " at " + s.url
			}
		}
	} else {
		// A console another conductor runs closes there once it reads
		// console_enabled false (reconcileConsoles).
		c.closeConsole(n.ID)
		delete(info, internalConsolePort)
		delete(info, internalConsoleURL)
		delete(info, internalConsoleHost)
	}
	ev := history.Event{NodeID: n.ID, Type: consoleEvents, User: who, Conductor: c.cfg.Name, Message: msg}
	upd := c.db.Node.UpdateOneID(n.ID)
	if err != nil {
		op := "enabling"
		if !enabled {
			op = "disabling"
		}
		text := fmt.Sprintf("Error %s the console on node %s. Reason: ", op, n.UUID)
		ev.Failed(text, err)
		upd.SetLastError(text + bmc.Summary(err))
	} else {
		upd.SetConsoleEnabled(enabled).SetDriverInternalInfo(info).ClearLastError()
	}
	if err := c.durably(ctx, func() error { return upd.Exec(ctx) }); err != nil {
		c.log.Error("recording console state", "node", n.UUID, "err", err)
	}
	_ = c.durably(ctx, func() error { return history.Record(ctx, c.db.Client, ev) })
}

// openConsole starts the node's listener on its ipmi_terminal_port, else
// on the first free port of the range; a node's previous port is tried
// first, so a restored console keeps its URL.
func (c *Conductor) openConsole(n *ent.Node) (*consoleSession, error) {
	c.closeConsole(n.ID)
	var ports []int
	if p, ok := n.DriverInfo["ipmi_terminal_port"]; ok {
		v, err := strconv.Atoi(fmt.Sprint(p))
		if err != nil {
			return nil, fmt.Errorf("driver_info/ipmi_terminal_port %v is not a port", p)
		}
		ports = []int{v}
	} else {
		if p, ok := n.DriverInternalInfo[internalConsolePort]; ok {
			if v, err := strconv.Atoi(fmt.Sprint(p)); err == nil && v >= c.cfg.Console.PortMin && v <= c.cfg.Console.PortMax {
				ports = append(ports, v)
			}
		}
		for p := c.cfg.Console.PortMin; p > 0 && p <= c.cfg.Console.PortMax; p++ {
			ports = append(ports, p)
		}
	}
	var ln net.Listener
	var port int
	var err error
	for _, p := range ports {
		// A port another node's listener or another program holds fails
		// to bind: binding is the check.
		if ln, err = net.Listen("tcp", net.JoinHostPort(c.cfg.Console.Host, strconv.Itoa(p))); err == nil {
			port = p
			break
		}
	}
	if ln == nil {
		if len(ports) > 1 {
			return nil, fmt.Errorf("no free port in the console port range %d:%d on %s", c.cfg.Console.PortMin, c.cfg.Console.PortMax, c.cfg.Console.Host)
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	s := &consoleSession{port: port, url: "tcp://" + net.JoinHostPort(c.cfg.Console.Host, strconv.Itoa(port)), ln: ln, ctx: ctx, cancel: cancel}
	c.cons.mu.Lock()
	if c.cons.open == nil {
		c.cons.open = map[int]*consoleSession{}
	}
	c.cons.open[n.ID] = s
	c.cons.mu.Unlock()
	snapshot := *n
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		c.serveConsole(s, &snapshot)
	}()
	// The listener ends with the conductor too.
	context.AfterFunc(ctx, func() { ln.Close() })
	return s, nil
}

// serveConsole serves the clients of one node's console one after the
// other: like Ironic's socat with max-children=1, a second client waits
// (in the listen backlog) until the first one leaves.
func (c *Conductor) serveConsole(s *consoleSession, n *ent.Node) {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		if err := c.runSOL(s.ctx, n, conn); err != nil && s.ctx.Err() == nil {
			c.log.Warn("console session failed", "node", n.UUID, "err", err)
		}
		conn.Close()
	}
}

// runSOL connects one client to the node's serial console until either
// side ends, or the console is closed.
func (c *Conductor) runSOL(ctx context.Context, n *ent.Node, conn io.ReadWriteCloser) error {
	cl, err := c.client(n)
	if err != nil {
		return err
	}
	defer cl.Close()
	sol, ok := cl.(bmc.SOL)
	if !ok {
		return errors.New("the driver has no serial console")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := sol.DeactivateSOL(ctx); err != nil {
		return err
	}
	// A client that hangs up ends ipmitool, which would otherwise hold
	// the BMC's one SOL session until its own timeout.
	return sol.ActivateSOL(ctx, hangup{conn, cancel}, conn)
}

// hangup is a client's side of a console: its end cancels the session.
type hangup struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (h hangup) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if err != nil {
		h.cancel()
	}
	return n, err
}

// closeConsole ends a node's listener and its client, if this conductor
// runs one; ending the client kills its ipmitool, and the next session
// deactivates whatever the BMC kept of it.
func (c *Conductor) closeConsole(id int) {
	c.cons.mu.Lock()
	s := c.cons.open[id]
	delete(c.cons.open, id)
	c.cons.mu.Unlock()
	if s == nil {
		return
	}
	s.cancel()
	s.ln.Close()
	s.done.Wait()
}

// reconcileConsoles closes the listeners of nodes whose console is no
// longer this conductor's to run: the node was deleted, its console
// disabled (a lease that ended, a tear down, a request another replica
// served) or taken by another conductor.
func (c *Conductor) reconcileConsoles(ctx context.Context) error {
	c.cons.mu.Lock()
	ids := make([]int, 0, len(c.cons.open))
	for id := range c.cons.open {
		ids = append(ids, id)
	}
	c.cons.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	ns, err := c.db.Node.Query().Where(node.IDIn(ids...), node.ConsoleEnabled(true)).
		Select(node.FieldID, node.FieldDriverInternalInfo).All(ctx)
	if err != nil {
		return err
	}
	keep := map[int]bool{}
	for _, n := range ns {
		if h, _ := n.DriverInternalInfo[internalConsoleHost].(string); h == c.cfg.Name {
			keep[n.ID] = true
		}
	}
	for _, id := range ids {
		if !keep[id] {
			c.closeConsole(id)
		}
	}
	return nil
}

// restoreConsoles reopens, at start, the consoles this conductor ran
// before it stopped, as Ironic's conductor does (_start_consoles); one
// that cannot be reopened is disabled, with the reason in last_error.
func (c *Conductor) restoreConsoles(ctx context.Context) error {
	ns, err := c.db.Node.Query().Where(node.ConsoleEnabled(true), node.ConsoleInterface(ConsoleSocat)).All(ctx)
	if err != nil {
		return err
	}
	for _, n := range ns {
		if h, _ := n.DriverInternalInfo[internalConsoleHost].(string); h != c.cfg.Name {
			continue
		}
		ev := history.Event{NodeID: n.ID, Type: consoleEvents, Conductor: c.cfg.Name}
		s, err := c.openConsole(n)
		if err != nil {
			text := "Failed to start console while starting conductor, so changing the console_enabled status to False: "
			ev.Failed(text, err)
			info := cloneInfo(n.DriverInternalInfo)
			delete(info, internalConsolePort)
			delete(info, internalConsoleURL)
			delete(info, internalConsoleHost)
			if err := c.db.Node.UpdateOneID(n.ID).SetConsoleEnabled(false).SetDriverInternalInfo(info).SetLastError(text + bmc.Summary(err)).Exec(ctx); err != nil {
				return err
			}
		} else {
			ev.Message = "Console restored at conductor start at " + s.url
			if s.url != n.DriverInternalInfo[internalConsoleURL] {
				info := cloneInfo(n.DriverInternalInfo)
				info[internalConsolePort], info[internalConsoleURL] = s.port, s.url
				if err := c.db.Node.UpdateOneID(n.ID).SetDriverInternalInfo(info).Exec(ctx); err != nil {
					return err
				}
			}
		}
		if err := history.Record(ctx, c.db.Client, ev); err != nil {
			return err
		}
	}
	return nil
}

// consoleReconcileEvery is how soon a console closes after its node's
// console was disabled elsewhere; the query runs only while consoles are
// open and reads those nodes only.
const consoleReconcileEvery = time.Second

// ConsoleOpening is what OpenConsole answers: where the conductor
// listens, and the node and its lease as they were, which the open
// console is checked against (RecheckConsole).
type ConsoleOpening struct {
	URL, UUID     string
	Owner, Lessee string
}

// OpenConsole is a portal client's way into a node's serial console: it
// checks get_console for the caller, as every connection must, and
// answers where the conductor listens. Each opening is audited: a
// console is a way into the machine.
func (o *Ops) OpenConsole(ctx context.Context, ident string) (op ConsoleOpening, err error) {
	n, err := o.Nodes.Authorized(ctx, ident, RuleGetConsole)
	if err != nil {
		return op, err
	}
	defer func() { o.Guard.Done(ctx, RuleGetConsole, "node", n.UUID, err, map[string]any{"open": "portal"}) }()
	if !n.ConsoleEnabled {
		return op, errs.Conflict("Console access is not enabled on node %s", n.UUID)
	}
	url, _ := n.DriverInternalInfo[internalConsoleURL].(string)
	if consoleInterface(n) != ConsoleSocat || url == "" {
		return op, errs.Conflict("Node %s's console interface %s has no stream the portal can show", n.UUID, consoleInterface(n))
	}
	return ConsoleOpening{URL: url, UUID: n.UUID, Owner: n.Owner, Lessee: n.Lessee}, nil
}

// ErrLeaseChanged is RecheckConsole's answer when the node's owner or
// lessee is no longer what it was when the console opened.
var ErrLeaseChanged = errors.New("the node's lease changed")

// RecheckConsole asks again, for a console the caller has open, what
// OpenConsole asked: the caller still passes get_console on the node,
// and the node is still leased as it was (ErrLeaseChanged). It is
// asked every second or so while the console is open, so it is one
// query, and audits only a refusal, as every authorization does.
func (o *Ops) RecheckConsole(ctx context.Context, op ConsoleOpening) error {
	n, err := o.Nodes.Authorized(ctx, op.UUID, RuleGetConsole)
	if n != nil && (n.Owner != op.Owner || n.Lessee != op.Lessee) {
		return ErrLeaseChanged
	}
	return err
}
