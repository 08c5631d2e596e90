package bmc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ironic's power state names.
const (
	PowerOn       = "power on"
	PowerOff      = "power off"
	Rebooting     = "rebooting"
	SoftPowerOff  = "soft power off"
	SoftRebooting = "soft rebooting"
)

// PowerTargets lists the power targets a client may ask for.
var PowerTargets = []string{PowerOn, PowerOff, Rebooting, SoftPowerOff, SoftRebooting}

// Boot is a node's next boot device as the BMC reports it.
type Boot struct {
	Device     string // pxe, disk, cdrom, bios, safe; "" when the BMC has no override
	Persistent *bool  // nil when the BMC does not say
}

// Client talks to one node's BMC. SetPower and Restart only send the
// command; Power (power.go) waits for the BMC to report the result.
type Client interface {
	PowerState(ctx context.Context) (string, error)
	// SetPower asks for power on, power off or soft power off.
	SetPower(ctx context.Context, target string) error
	// Restart restarts a running machine (gracefully when soft); it
	// returns ErrUnsupported when the BMC has no such command, and the
	// caller powers off and on instead.
	Restart(ctx context.Context, soft bool) error
	BootDevice(ctx context.Context) (Boot, error)
	// SetBootDevice sets the next boot device; mode is "uefi" or "bios"
	// to change the boot mode, "" to keep the machine's.
	SetBootDevice(ctx context.Context, device string, persistent bool, mode string) error
	ResetBMC(ctx context.Context) error
	Close()
}

// Options bound every BMC call.
type Options struct {
	Timeout time.Duration // per call; default 20 s
	Retries int           // extra attempts when the BMC does not answer; default 1, negative for none
	// PowerPoll is how often Power reads the state while waiting; default 1 s.
	PowerPoll time.Duration
	// Metrics counts the calls; nil counts none (a client opened only
	// to check driver_info calls nothing).
	Metrics *Metrics
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Second
	}
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = 1
	}
	if o.PowerPoll <= 0 {
		o.PowerPoll = time.Second
	}
	return o
}

// Open returns a client for a node's BMC. Nothing is sent until a call.
func Open(driver, nodeUUID string, info map[string]any, o Options) (Client, error) {
	if err := Validate(driver, info); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	switch Canonical(driver) {
	case "fake-hardware":
		return fakeFor(nodeUUID), nil
	case "ipmi":
		return openIPMI(info, o), nil
	case "redfish":
		return openRedfish(info, o)
	case "bmclib":
		return openBmclib(info, o)
	}
	return nil, fmt.Errorf("driver %s: %w", driver, ErrUnsupported)
}

func str(info map[string]any, k string) string { s, _ := info[k].(string); return s }

func intOr(info map[string]any, k string, def int) string {
	if v, ok := info[k]; ok && v != nil {
		if n, err := asInt(v); err == nil {
			return strconv.Itoa(n)
		}
	}
	return strconv.Itoa(def)
}

// secretsOf lists the credential values to mask in messages.
func secretsOf(info map[string]any) []string {
	var out []string
	for k, v := range info {
		if s, ok := v.(string); ok && s != "" && (IsSecretKey(k) || strings.HasSuffix(k, "_username")) {
			out = append(out, s)
		}
	}
	return out
}

type retryKey struct{}

// OnRetry returns ctx with fn called before each retry of a BMC call
// that did not answer: try counts from 2, of is every try there will be,
// each bounded by timeout. A run records it so that its page can say how
// the wait is going; a BMC that answers never calls it.
func OnRetry(ctx context.Context, fn func(try, of int, timeout time.Duration)) context.Context {
	return context.WithValue(ctx, retryKey{}, fn)
}

// caller serialises a client's calls, bounds each with the timeout and
// retries only a BMC that did not answer.
type caller struct {
	mu      sync.Mutex
	o       Options
	where   string
	secrets []string
	// driver labels the call's metrics: ipmi, redfish, bmclib:PROVIDER.
	driver string
}

func (c *caller) call(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Timed from the lock: a call queued behind another on the same
	// client is not the BMC being slow.
	start := time.Now()
	err := c.tries(ctx, op, fn)
	c.o.Metrics.observe(c.driver, op, time.Since(start), err)
	return err
}

// tries makes the call's attempts; the caller holds c.mu.
func (c *caller) tries(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	var err error
	for attempt := 0; attempt <= c.o.Retries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			}
			if fn, ok := ctx.Value(retryKey{}).(func(int, int, time.Duration)); ok {
				fn(attempt+1, c.o.Retries+1, c.o.Timeout)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
		err = fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
		e := classify(op, c.where, err, c.secrets)
		err = e
		if e.Kind == ErrUnreachable {
			e.Tries, e.Timeout = attempt+1, c.o.Timeout
		}
		if !Retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// fake is an in-memory BMC per node, instant, for demos and scale tests.
type fake struct {
	mu          sync.Mutex
	power, boot string
	persistent  bool
	bios        fakeBIOS
	media       fakeMedia
	firmware    fakeFirmware
	raid        fakeRAID
	led         string // indicator state; "" is off
	uuid        string
}

// fakes holds one in-memory BMC per fake node this process has changed
// or asked more than its power state, a few hundred bytes each: at most
// the fleet's fake nodes, less those deleted through this process
// (ForgetFake). A node only the power sync has read is not kept: its
// machine is as a fake one starts, powered off. Keeping those was 3 MB
// of the live heap at 10,000 fake nodes (docs/memory.md).
var fakes sync.Map // node UUID -> *fake

// fakeFor is the node's kept fake BMC, else a new one as it starts, kept
// by its first method other than PowerState. Every other method works on
// f.kept(): the client's first change stores it, or finds one another
// client stored first, so two clients of a node never hold two machines.
func fakeFor(uuid string) *fake {
	if v, ok := fakes.Load(uuid); ok {
		return v.(*fake)
	}
	return &fake{power: PowerOff, boot: "disk", uuid: uuid}
}

// kept is the fake BMC kept for f's node, keeping f if none is.
func (f *fake) kept() *fake {
	v, _ := fakes.LoadOrStore(f.uuid, f)
	return v.(*fake)
}

// current is the fake BMC kept for f's node, else f, unchanged since it
// was made (only kept fakes change).
func (f *fake) current() *fake {
	if v, ok := fakes.Load(f.uuid); ok {
		return v.(*fake)
	}
	return f
}

// ForgetFake drops a deleted node's fake BMC, so that a fleet enrolled and
// deleted over and over does not keep every one it ever had, and a node
// enrolled again under the same UUID starts with a fresh one. Another
// replica's copy goes when that process restarts.
func ForgetFake(nodeUUID string) { fakes.Delete(nodeUUID) }

func (f *fake) PowerState(context.Context) (string, error) {
	f = f.current()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.power, nil
}

func (f *fake) SetPower(_ context.Context, target string) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch target {
	case PowerOn:
		if f.power != PowerOn {
			f.bios.reset()
		}
		f.power = PowerOn
	case PowerOff, SoftPowerOff:
		f.power = PowerOff
	default:
		return fmt.Errorf("power state %q: %w", target, ErrUnsupported)
	}
	return nil
}

func (f *fake) Restart(context.Context, bool) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bios.reset()
	f.power = PowerOn
	return nil
}

func (f *fake) BootDevice(context.Context) (Boot, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.persistent
	return Boot{Device: f.boot, Persistent: &p}, nil
}

func (f *fake) SetBootDevice(_ context.Context, device string, persistent bool, _ string) error {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boot, f.persistent = device, persistent
	return nil
}

func (f *fake) ResetBMC(context.Context) error { return nil }
func (f *fake) Close()                         {}

// errUnsupported is a classified "not supported" for op.
func errUnsupported(op, where string) error {
	return &Error{Op: op, Where: where, Kind: ErrUnsupported}
}
