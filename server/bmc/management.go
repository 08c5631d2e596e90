package bmc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish/common"
	"github.com/stmcginnis/gofish/redfish"
)

// Indicator states and components, in Ironic's words
// (ironic/common/indicator_states.py, components.py).
const (
	IndicatorOn       = "on"
	IndicatorOff      = "off"
	IndicatorBlinking = "blinking"
	IndicatorUnknown  = "unknown"
)

// Indicator is one LED a BMC lets a caller read or set.
type Indicator struct {
	Component string // system, chassis
	ID        string // Ironic's: the resource's UUID on Redfish
	ReadOnly  bool
	States    []string // the states it may be set to
	State     string   // now; unknown when the BMC cannot say
}

// Indicators is a BMC with indicator LEDs.
type Indicators interface {
	Indicators(ctx context.Context) ([]Indicator, error)
	SetIndicator(ctx context.Context, component, id, state string) error
}

// NMI is a BMC that injects a non-maskable interrupt, which makes a
// hung operating system dump its memory.
type NMI interface {
	InjectNMI(ctx context.Context) error
}

// EventLog is a BMC whose event log can be cleared.
type EventLog interface {
	ClearEventLog(ctx context.Context) error
}

// settable are the states Ironic's redfish driver offers for every LED.
var settable = []string{IndicatorBlinking, IndicatorOff, IndicatorOn}

var ledStates = map[common.IndicatorLED]string{
	common.LitIndicatorLED: IndicatorOn, common.OffIndicatorLED: IndicatorOff,
	common.BlinkingIndicatorLED: IndicatorBlinking,
}

func ledState(l common.IndicatorLED) string {
	if s, ok := ledStates[l]; ok {
		return s
	}
	return IndicatorUnknown
}

// redfishLEDs lists the system's LED and those of the chassis it links,
// with the resource each is patched at.
func (c *redfishClient) redfishLEDs() ([]Indicator, []string, error) {
	sys, err := c.system()
	if err != nil {
		return nil, nil, err
	}
	var out []Indicator
	var paths []string
	if sys.IndicatorLED != "" {
		out = append(out, Indicator{Component: "system", ID: sys.UUID, States: settable, State: ledState(sys.IndicatorLED)})
		paths = append(paths, sys.ODataID)
	}
	var raw struct {
		Links struct{ Chassis []common.Link }
	}
	if err := c.getJSON(sys.ODataID, &raw); err != nil {
		return nil, nil, err
	}
	for _, l := range raw.Links.Chassis {
		ch, err := redfish.GetChassis(c.api, l.String())
		if err != nil {
			return nil, nil, err
		}
		if ch.IndicatorLED != "" {
			out = append(out, Indicator{Component: "chassis", ID: ch.UUID, States: settable, State: ledState(ch.IndicatorLED)})
			paths = append(paths, ch.ODataID)
		}
	}
	return out, paths, nil
}

func (c *redfishClient) Indicators(ctx context.Context) ([]Indicator, error) {
	var out []Indicator
	err := c.do(ctx, "reading indicators", func() (err error) {
		out, _, err = c.redfishLEDs()
		return err
	})
	return out, err
}

func (c *redfishClient) SetIndicator(ctx context.Context, component, id, state string) error {
	op := fmt.Sprintf("setting indicator %s@%s %s", id, component, state)
	var led common.IndicatorLED
	for l, s := range ledStates {
		if s == state {
			led = l
		}
	}
	if led == "" {
		return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "no such indicator state"}
	}
	return c.do(ctx, op, func() error {
		leds, paths, err := c.redfishLEDs()
		if err != nil {
			return err
		}
		for i, l := range leds {
			if l.Component == component && l.ID == id {
				resp, err := c.api.Patch(paths[i], map[string]any{"IndicatorLED": led})
				if err == nil {
					resp.Body.Close()
				}
				return err
			}
		}
		return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "the BMC has no such indicator"}
	})
}

func (c *redfishClient) InjectNMI(ctx context.Context) error {
	return c.reset(ctx, "injecting an NMI", redfish.NmiResetType)
}

// ClearEventLog clears every log service of the system and its managers
// that offers LogService.ClearLog.
func (c *redfishClient) ClearEventLog(ctx context.Context) error {
	op := "clearing the event log"
	return c.do(ctx, op, func() error {
		sys, err := c.system()
		if err != nil {
			return err
		}
		logs, err := sys.LogServices()
		if err != nil {
			return err
		}
		ms, err := sys.ManagedBy()
		if err != nil {
			return err
		}
		for _, m := range ms {
			ml, err := m.LogServices()
			if err != nil {
				return err
			}
			logs = append(logs, ml...)
		}
		if len(logs) == 0 {
			return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "the BMC offers no log service"}
		}
		for _, l := range logs {
			if err := l.ClearLog(); err != nil {
				return err
			}
		}
		return nil
	})
}

// IPMI has one LED a client can set, the chassis identify light; it
// cannot be read back (Get Chassis Status leaves it optional).
const ipmiIdentify = "identify"

func (c *ipmiClient) Indicators(context.Context) ([]Indicator, error) {
	return []Indicator{{Component: "chassis", ID: ipmiIdentify, States: []string{IndicatorOff, IndicatorOn}, State: IndicatorUnknown}}, nil
}

func (c *ipmiClient) SetIndicator(ctx context.Context, component, id, state string) error {
	op := fmt.Sprintf("setting indicator %s@%s %s", id, component, state)
	arg := map[string]string{IndicatorOn: "force", IndicatorOff: "0"}[state]
	if component != "chassis" || id != ipmiIdentify || arg == "" {
		return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: "IPMI sets only identify@chassis, on or off"}
	}
	_, err := c.run(ctx, op, "chassis", "identify", arg)
	return err
}

func (c *ipmiClient) InjectNMI(ctx context.Context) error {
	_, err := c.run(ctx, "injecting an NMI", "chassis", "power", "diag")
	var e *Error
	if errors.As(err, &e) && e.Kind == ErrBMC && strings.Contains(strings.ToLower(e.Said), "invalid data field") {
		// The BMC's word for a chassis control it does not implement.
		e.Kind, e.Reason = ErrUnsupported, "the BMC has no diagnostic interrupt"
	}
	return err
}

func (c *ipmiClient) ClearEventLog(ctx context.Context) error {
	_, err := c.run(ctx, "clearing the event log", "sel", "clear")
	return err
}

// fake LEDs are Ironic's fake management interface's: the system's
// settable "led" and the chassis' read-only "led-0", which is on. The
// system LED's state is kept under the fake's lock.
func (f *fake) Indicators(context.Context) ([]Indicator, error) {
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.led
	if st == "" {
		st = IndicatorOff
	}
	return []Indicator{{Component: "system", ID: fakeLED, States: settable, State: st},
		{Component: "chassis", ID: "led-0", ReadOnly: true, States: []string{IndicatorOff, IndicatorOn}, State: IndicatorOn}}, nil
}

// fakeLED is the fake machine's settable LED, as Ironic's fake names it.
const fakeLED = "led"

func (f *fake) SetIndicator(_ context.Context, component, id, state string) error {
	if component != "system" || id != fakeLED || !slices.Contains(settable, state) {
		return &Error{Op: "setting indicator", Kind: ErrUnsupported, Reason: "the fake machine's only settable LED is led@system"}
	}
	f = f.kept()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.led = state
	return nil
}

func (f *fake) InjectNMI(context.Context) error     { return nil }
func (f *fake) ClearEventLog(context.Context) error { return nil }
