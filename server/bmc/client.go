package bmc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
)

// Ironic's power state names.
const (
	PowerOn       = "power on"
	PowerOff      = "power off"
	Rebooting     = "rebooting"
	SoftPowerOff  = "soft power off"
	SoftRebooting = "soft rebooting"
)

// Boot devices a client may set.
var BootDevices = []string{"pxe", "disk", "cdrom", "bios", "safe"}

// Errors a person can act on; Client errors wrap one of them.
var (
	ErrAuth        = errors.New("the BMC refused the credentials")
	ErrUnreachable = errors.New("the BMC did not answer")
	ErrUnsupported = errors.New("the driver does not support this")
)

// Client talks to one node's BMC.
type Client interface {
	PowerState(ctx context.Context) (string, error)
	SetPower(ctx context.Context, target string) error
	BootDevice(ctx context.Context) (string, error)
	SetBootDevice(ctx context.Context, device string, persistent bool) error
	ResetBMC(ctx context.Context) error
	Close()
}

// Options bound every BMC call.
type Options struct {
	Timeout time.Duration // per call; default 20 s
	Retries int           // extra attempts when the BMC does not answer; default 1
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
	return o
}

// Open returns a client for a node's BMC. Nothing is sent until a call.
func Open(driver, nodeUUID string, info map[string]any, o Options) (Client, error) {
	if err := Validate(driver, info); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	str := func(k string) string { s, _ := info[k].(string); return s }
	switch driver {
	case "fake":
		return fakeFor(nodeUUID), nil
	case "ipmi":
		port := "623"
		if v, ok := info["ipmi_port"]; ok && v != nil {
			n, _ := asInt(v)
			port = strconv.Itoa(n)
		}
		cipher := "3"
		if v, ok := info["ipmi_cipher_suite"]; ok && v != nil {
			n, _ := asInt(v)
			cipher = strconv.Itoa(n)
		}
		host := str("ipmi_address")
		c := bmclib.NewClient(host, str("ipmi_username"), str("ipmi_password"),
			bmclib.WithIpmitoolPort(port), bmclib.WithIpmitoolCipherSuite(cipher), bmclib.WithPerProviderTimeout(o.Timeout))
		// Only ipmitool: the registry would otherwise try every vendor's
		// protocol against an IPMI-only BMC and wait on each.
		c.Registry.Drivers = c.Registry.For("ipmitool")
		return &libClient{c: c, o: o, where: net.JoinHostPort(host, port), secrets: secretsOf(info)}, nil
	case "redfish":
		addr := str("redfish_address")
		if !strings.Contains(addr, "://") {
			addr = "https://" + addr
		}
		u, err := url.Parse(addr)
		if err != nil {
			return nil, &FieldError{Field: "driver_info/redfish_address", Msg: err.Error()}
		}
		opts := []bmclib.Option{bmclib.WithPerProviderTimeout(o.Timeout)}
		if p := u.Port(); p != "" {
			opts = append(opts, bmclib.WithRedfishPort(p))
		}
		if sys := str("redfish_system_id"); sys != "" {
			opts = append(opts, bmclib.WithRedfishSystemName(sys[strings.LastIndex(sys, "/")+1:]))
		}
		c := bmclib.NewClient(u.Hostname(), str("redfish_username"), str("redfish_password"), opts...)
		c.Registry.Drivers = c.Registry.For("gofish")
		return &libClient{c: c, o: o, where: u.Host, secrets: secretsOf(info)}, nil
	}
	return nil, fmt.Errorf("driver %s: %w", driver, ErrUnsupported)
}

func secretsOf(info map[string]any) []string {
	var out []string
	for k, v := range info {
		if s, ok := v.(string); ok && s != "" && (IsSecretKey(k) || strings.HasSuffix(k, "_username")) {
			out = append(out, s)
		}
	}
	return out
}

// libClient drives a BMC through bmclib.
type libClient struct {
	c       *bmclib.Client
	o       Options
	where   string
	secrets []string
	mu      sync.Mutex
	open    bool
}

// call runs fn with a timeout, retrying a BMC that did not answer, and
// turns failures into errors that name the BMC and never a credential.
func (l *libClient) call(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	for attempt := 0; attempt <= l.o.Retries; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, l.o.Timeout)
		if !l.open {
			if err = l.c.Open(cctx); err == nil {
				l.open = true
			}
		}
		if err == nil {
			err = fn(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		err = l.classify(what, err)
		if !errors.Is(err, ErrUnreachable) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (l *libClient) classify(what string, err error) error {
	msg := err.Error()
	for _, s := range l.secrets {
		msg = strings.ReplaceAll(msg, s, "******")
	}
	low := strings.ToLower(msg)
	kind := ErrUnreachable
	switch {
	case strings.Contains(low, "rakp") || strings.Contains(low, "password") || strings.Contains(low, "unauthorized") ||
		strings.Contains(low, "authentication") || strings.Contains(low, "401"):
		kind = ErrAuth
	case strings.Contains(low, "not supported") || strings.Contains(low, "not implemented"):
		kind = ErrUnsupported
	}
	// ipmitool answers a wrong password and a dead port alike ("unable to
	// establish session"); tell them apart by whether the port answered.
	if kind == ErrUnreachable && strings.Contains(low, "unable to establish") && l.answers() {
		kind = ErrAuth
	}
	detail := msg
	if len(detail) > 300 {
		detail = detail[:300] + "…"
	}
	return fmt.Errorf("%s at %s: %w (%s)", what, l.where, kind, strings.TrimSpace(detail))
}

// answers probes the BMC's UDP port with an RMCP presence ping.
func (l *libClient) answers() bool {
	conn, err := net.DialTimeout("udp", l.where, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	ping := []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x80, 0x00, 0x00, 0x00}
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write(ping); err != nil {
		return false
	}
	buf := make([]byte, 64)
	_, err = conn.Read(buf)
	return err == nil
}

func (l *libClient) PowerState(ctx context.Context) (string, error) {
	var st string
	err := l.call(ctx, "reading power state", func(ctx context.Context) error {
		s, err := l.c.GetPowerState(ctx)
		st = s
		return err
	})
	if err != nil {
		return "", err
	}
	// bmclib hands back the provider's words: "Chassis Power is on", "On".
	low := strings.ToLower(st)
	switch {
	case strings.Contains(low, "off"):
		return PowerOff, nil
	case strings.Contains(low, "on"):
		return PowerOn, nil
	}
	return "", fmt.Errorf("reading power state at %s: unexpected answer %q", l.where, strings.TrimSpace(st))
}

func (l *libClient) set(ctx context.Context, state string) error {
	return l.call(ctx, "setting power "+state, func(ctx context.Context) error {
		_, err := l.c.SetPowerState(ctx, state)
		return err
	})
}

func (l *libClient) SetPower(ctx context.Context, target string) error {
	switch target {
	case PowerOn:
		return l.set(ctx, "on")
	case PowerOff:
		return l.set(ctx, "off")
	case SoftPowerOff:
		return l.set(ctx, "soft")
	case Rebooting, SoftRebooting:
		// Off then on works whatever the starting state; a BMC "cycle"
		// refuses a machine that is off.
		off := "off"
		if target == SoftRebooting {
			off = "soft"
		}
		if err := l.set(ctx, off); err != nil {
			return err
		}
		return l.set(ctx, "on")
	}
	return fmt.Errorf("power state %q: %w", target, ErrUnsupported)
}

func (l *libClient) BootDevice(context.Context) (string, error) {
	// bmclib v2.3 can set the boot device but not read it back.
	return "", fmt.Errorf("reading the boot device: %w", ErrUnsupported)
}

func (l *libClient) SetBootDevice(ctx context.Context, device string, persistent bool) error {
	return l.call(ctx, "setting boot device "+device, func(ctx context.Context) error {
		_, err := l.c.SetBootDevice(ctx, device, persistent, false)
		return err
	})
}

func (l *libClient) ResetBMC(ctx context.Context) error {
	return l.call(ctx, "resetting the BMC", func(ctx context.Context) error {
		_, err := l.c.ResetBMC(ctx, "warm")
		return err
	})
}

func (l *libClient) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.c.Close(ctx)
		l.open = false
	}
}

// fake is an in-memory BMC per node, instant, for demos and scale tests.
type fake struct {
	mu          sync.Mutex
	power, boot string
}

var fakes sync.Map // node UUID -> *fake

func fakeFor(uuid string) *fake {
	v, _ := fakes.LoadOrStore(uuid, &fake{power: PowerOff, boot: "disk"})
	return v.(*fake)
}

func (f *fake) PowerState(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.power, nil
}

func (f *fake) SetPower(_ context.Context, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch target {
	case PowerOn, Rebooting, SoftRebooting:
		f.power = PowerOn
	case PowerOff, SoftPowerOff:
		f.power = PowerOff
	default:
		return fmt.Errorf("power state %q: %w", target, ErrUnsupported)
	}
	return nil
}

func (f *fake) BootDevice(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boot, nil
}

func (f *fake) SetBootDevice(_ context.Context, device string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boot = device
	return nil
}

func (f *fake) ResetBMC(context.Context) error { return nil }
func (f *fake) Close()                         {}
