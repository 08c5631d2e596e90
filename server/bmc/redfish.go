package bmc

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/common"
	"github.com/stmcginnis/gofish/redfish"
)

// redfishClient drives a Redfish BMC through gofish, speaking the
// resources Ironic's redfish driver speaks: the system's Reset action,
// its Boot override and its manager's Reset.
type redfishClient struct {
	caller
	endpoint   string
	user, pass string
	auth       string // basic, session, auto
	systemID   string
	httpc      *http.Client
	// cur is the running call's context: gofish keeps one context per
	// connection, so the transport substitutes the call's own.
	cur     context.Context
	api     *gofish.APIClient
	sysPath string
}

type ctxTransport struct {
	base http.RoundTripper
	c    *redfishClient
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(r.WithContext(t.c.cur))
}

func openRedfish(info map[string]any, o Options) (*redfishClient, error) {
	u, err := ParseRedfishAddress(str(info, "redfish_address"))
	if err != nil {
		return nil, fieldErr("redfish_address", "driver_info/redfish_address: %v", err)
	}
	tc, err := tlsConfig("redfish_verify_ca", info["redfish_verify_ca"])
	if err != nil {
		return nil, err
	}
	c := &redfishClient{
		endpoint: strings.TrimSuffix(u.String(), "/"),
		user:     str(info, "redfish_username"), pass: str(info, "redfish_password"),
		auth: str(info, "redfish_auth_type"), systemID: str(info, "redfish_system_id"),
		cur: context.Background(),
	}
	if c.auth == "" {
		c.auth = "auto"
	}
	c.httpc = &http.Client{Transport: ctxTransport{c: c, base: &http.Transport{
		// BMCs sit on management networks: no environment proxy, and
		// every dial passes the BMC network allow-list.
		DialContext:         dialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: o.Timeout,
		IdleConnTimeout:     30 * time.Second,
	}}}
	c.caller = caller{o: o, where: u.Host, secrets: secretsOf(info), driver: "redfish"}
	return c, nil
}

// tlsConfig reads a verify_ca key (redfish_verify_ca, bmclib_verify_ca)
// as Ironic reads redfish_verify_ca: true (the default)
// verifies against the system's CAs, false verifies nothing; a PEM
// bundle, inline or in a file under the operator's CA directory, is
// what to verify against. The file is checked again here, not only when
// it was written: it may predate the rules, or the directory may have
// changed since; whatever is wrong, the answer says nothing about it.
func tlsConfig(key string, v any) (*tls.Config, error) {
	switch x := v.(type) {
	case nil:
		return &tls.Config{}, nil
	case bool:
		return &tls.Config{InsecureSkipVerify: !x}, nil //nolint:gosec // the operator asked for it
	case string:
		switch {
		case strings.EqualFold(x, "true"):
			return &tls.Config{}, nil
		case strings.EqualFold(x, "false"):
			return &tls.Config{InsecureSkipVerify: true}, nil //nolint:gosec // the operator asked for it
		case isInlinePEM(x):
			if len(x) > MaxInlineCABytes {
				return nil, fieldErr(key, "driver_info/%s is a PEM bundle larger than %d bytes", key, MaxInlineCABytes)
			}
			pool, err := parseCAs([]byte(x))
			if err != nil {
				return nil, fieldErr(key, "driver_info/%s: the PEM bundle %v", key, err)
			}
			return &tls.Config{RootCAs: pool}, nil
		}
		pool, err := loadCAFile(x)
		if err != nil {
			return nil, caPathRefused(key)
		}
		return &tls.Config{RootCAs: pool}, nil
	}
	return nil, fieldErr(key, "driver_info/%s must be true, false or a PEM CA bundle", key)
}

// do runs fn connected; a session that expired (a BMC reset ends them)
// is opened again once.
func (c *redfishClient) do(ctx context.Context, op string, fn func() error) error {
	return c.call(ctx, op, func(ctx context.Context) error {
		c.cur = ctx
		defer func() { c.cur = context.Background() }()
		if err := c.connect(); err != nil {
			return err
		}
		err := fn()
		var rf *common.Error
		if errors.As(err, &rf) && rf.HTTPReturnedStatusCode == 401 && c.auth != "basic" {
			c.api = nil
			if err := c.connect(); err != nil {
				return err
			}
			err = fn()
		}
		return err
	})
}

func (c *redfishClient) connect() error {
	if c.api != nil {
		return nil
	}
	cfg := gofish.ClientConfig{Endpoint: c.endpoint, Username: c.user, Password: c.pass, HTTPClient: c.httpc, BasicAuth: c.auth == "basic"}
	api, err := gofish.ConnectContext(context.Background(), cfg)
	var rf *common.Error
	if err != nil && errors.As(err, &rf) {
		switch {
		case c.auth == "auto":
			// Sessions refused or missing: Basic, as Ironic's auto does.
			cfg.BasicAuth = true
			api, err = gofish.ConnectContext(context.Background(), cfg)
		case c.auth == "session" && rf.HTTPReturnedStatusCode == 0:
			return &Error{Op: "opening a session", Where: c.where, Kind: ErrUnsupported, Reason: "the BMC offers no Redfish sessions; set redfish_auth_type basic"}
		}
	}
	if err != nil {
		return err
	}
	path, err := c.findSystem(api)
	if err != nil {
		api.Logout()
		return err
	}
	c.api, c.sysPath = api, path
	return nil
}

// findSystem resolves redfish_system_id, Ironic's path form
// (/redfish/v1/Systems/<Id>) or a bare Id; without one, the BMC must
// have exactly one system.
func (c *redfishClient) findSystem(api *gofish.APIClient) (string, error) {
	if id := c.systemID; id != "" {
		if !strings.HasPrefix(id, "/") {
			id = "/redfish/v1/Systems/" + id
		}
		sys, err := redfish.GetComputerSystem(api, id)
		var rf *common.Error
		if errors.As(err, &rf) && rf.HTTPReturnedStatusCode == 404 {
			return "", &Error{Op: "finding the system", Where: c.where, Kind: ErrBMC, Message: "no system " + id + " (driver_info/redfish_system_id)"}
		}
		if err != nil {
			return "", err
		}
		return sys.ODataID, nil
	}
	systems, err := api.Service.Systems()
	if err != nil {
		return "", err
	}
	if len(systems) != 1 {
		var ids []string
		for _, s := range systems {
			ids = append(ids, s.ODataID)
		}
		return "", &Error{Op: "finding the system", Where: c.where, Kind: ErrBMC,
			Message: fmt.Sprintf("the BMC has %d systems; set driver_info/redfish_system_id", len(systems)), Said: strings.Join(ids, ", ")}
	}
	return systems[0].ODataID, nil
}

func (c *redfishClient) system() (*redfish.ComputerSystem, error) {
	return redfish.GetComputerSystem(c.api, c.sysPath)
}

func (c *redfishClient) PowerState(ctx context.Context) (string, error) {
	var st redfish.PowerState
	err := c.do(ctx, "reading power state", func() error {
		sys, err := c.system()
		if err == nil {
			st = sys.PowerState
		}
		return err
	})
	if err != nil {
		return "", err
	}
	// A transition reports the state it has not left yet, so waiting
	// goes on until the BMC says it arrived.
	switch st {
	case redfish.OnPowerState, redfish.PoweringOffPowerState:
		return PowerOn, nil
	case redfish.OffPowerState, redfish.PoweringOnPowerState:
		return PowerOff, nil
	}
	return "", &Error{Op: "reading power state", Where: c.where, Kind: ErrBMC, Message: fmt.Sprintf("unexpected PowerState %q", st)}
}

// reset sends the first of types the system supports.
func (c *redfishClient) reset(ctx context.Context, op string, types ...redfish.ResetType) error {
	return c.do(ctx, op, func() error {
		sys, err := c.system()
		if err != nil {
			return err
		}
		for _, t := range types {
			if len(sys.SupportedResetTypes) == 0 || slices.Contains(sys.SupportedResetTypes, t) {
				return sys.Reset(t)
			}
		}
		return &Error{Op: op, Where: c.where, Kind: ErrUnsupported, Reason: fmt.Sprintf("the system offers none of %v", types)}
	})
}

func (c *redfishClient) SetPower(ctx context.Context, target string) error {
	op := "setting power " + target
	switch target {
	case PowerOn:
		return c.reset(ctx, op, redfish.OnResetType, redfish.ForceOnResetType)
	case PowerOff:
		return c.reset(ctx, op, redfish.ForceOffResetType)
	case SoftPowerOff:
		return c.reset(ctx, op, redfish.GracefulShutdownResetType)
	}
	return errUnsupported(op, c.where)
}

func (c *redfishClient) Restart(ctx context.Context, soft bool) error {
	if soft {
		return c.reset(ctx, "soft rebooting", redfish.GracefulRestartResetType)
	}
	return c.reset(ctx, "rebooting", redfish.ForceRestartResetType)
}

var redfishTargets = map[string]redfish.BootSourceOverrideTarget{
	"pxe": redfish.PxeBootSourceOverrideTarget, "disk": redfish.HddBootSourceOverrideTarget,
	"cdrom": redfish.CdBootSourceOverrideTarget, "bios": redfish.BiosSetupBootSourceOverrideTarget,
	"uefihttp": redfish.UefiHTTPBootSourceOverrideTarget,
}

func (c *redfishClient) BootDevice(ctx context.Context) (Boot, error) {
	var b Boot
	err := c.do(ctx, "reading the boot device", func() error {
		sys, err := c.system()
		if err != nil {
			return err
		}
		if sys.Boot.BootSourceOverrideEnabled == redfish.DisabledBootSourceOverrideEnabled || sys.Boot.BootSourceOverrideTarget == redfish.NoneBootSourceOverrideTarget {
			return nil
		}
		b.Device = strings.ToLower(string(sys.Boot.BootSourceOverrideTarget))
		for name, t := range redfishTargets {
			if t == sys.Boot.BootSourceOverrideTarget {
				b.Device = name
			}
		}
		if e := sys.Boot.BootSourceOverrideEnabled; e != "" {
			p := e == redfish.ContinuousBootSourceOverrideEnabled
			b.Persistent = &p
		}
		return nil
	})
	return b, err
}

// SetBootDevice patches only the target and its persistence: the boot
// mode stays what the machine has unless mode asks otherwise.
func (c *redfishClient) SetBootDevice(ctx context.Context, device string, persistent bool, mode string) error {
	op := "setting boot device " + device
	t, ok := redfishTargets[device]
	if !ok {
		return errUnsupported(op, c.where)
	}
	boot := map[string]any{"BootSourceOverrideTarget": t, "BootSourceOverrideEnabled": redfish.OnceBootSourceOverrideEnabled}
	if persistent {
		boot["BootSourceOverrideEnabled"] = redfish.ContinuousBootSourceOverrideEnabled
	}
	switch mode {
	case "uefi":
		boot["BootSourceOverrideMode"] = redfish.UEFIBootSourceOverrideMode
	case "bios":
		boot["BootSourceOverrideMode"] = redfish.LegacyBootSourceOverrideMode
	}
	return c.do(ctx, op, func() error {
		// The BMC lists the targets it takes; sushy refuses any other
		// before sending, and so does Anvil, rather than let a BMC that
		// ignores an unknown target answer 200.
		allowed, err := c.bootTargets()
		if err != nil {
			return err
		}
		if len(allowed) > 0 && !slices.Contains(allowed, string(t)) {
			return &Error{Op: op, Where: c.where, Kind: ErrUnsupported,
				Reason: fmt.Sprintf("the BMC offers boot targets %s, not %s", strings.Join(allowed, ", "), t)}
		}
		resp, err := c.api.Patch(c.sysPath, map[string]any{"Boot": boot})
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}

// bootTargets reads the system's
// BootSourceOverrideTarget@Redfish.AllowableValues (gofish does not parse
// the annotation); nil when the BMC lists none.
func (c *redfishClient) bootTargets() ([]string, error) {
	resp, err := c.api.Get(c.sysPath)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var sys struct {
		Boot struct {
			Allowed []string `json:"BootSourceOverrideTarget@Redfish.AllowableValues"`
		}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&sys); err != nil {
		return nil, err
	}
	return sys.Boot.Allowed, nil
}

// ResetBMC restarts the system's manager, gracefully when it can.
func (c *redfishClient) ResetBMC(ctx context.Context) error {
	return c.do(ctx, "resetting the BMC", func() error {
		sys, err := c.system()
		if err != nil {
			return err
		}
		ms, err := sys.ManagedBy()
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			if ms, err = c.api.Service.Managers(); err != nil {
				return err
			}
		}
		if len(ms) == 0 {
			return &Error{Op: "resetting the BMC", Where: c.where, Kind: ErrUnsupported, Reason: "the BMC lists no manager"}
		}
		m := ms[0]
		t := redfish.GracefulRestartResetType
		if len(m.SupportedResetTypes) > 0 && !slices.Contains(m.SupportedResetTypes, t) {
			t = redfish.ForceRestartResetType
		}
		return m.Reset(t)
	})
}

func (c *redfishClient) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.cur = ctx
	c.api.Logout()
	c.cur = context.Background()
	c.api = nil
}
