package bmc

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ipmiClient drives a BMC with ipmitool, as Ironic's ipmitool driver
// does, so every ipmi_* key Ironic knows maps onto an ipmitool option.
type ipmiClient struct {
	caller
	host, port, user, pass string
	iface, priv, cipher    string
}

func openIPMI(info map[string]any, o Options) *ipmiClient {
	c := &ipmiClient{
		host: str(info, "ipmi_address"), port: intOr(info, "ipmi_port", 623),
		user: str(info, "ipmi_username"), pass: str(info, "ipmi_password"),
		iface: "lanplus", priv: "ADMINISTRATOR", cipher: intOr(info, "ipmi_cipher_suite", 3),
	}
	if str(info, "ipmi_protocol_version") == "1.5" {
		c.iface = "lan"
	}
	if p := str(info, "ipmi_priv_level"); p != "" {
		c.priv = p
	}
	c.caller = caller{o: o, where: net.JoinHostPort(c.host, c.port), secrets: secretsOf(info), driver: "ipmi"}
	return c
}

// run executes one ipmitool command. The password travels in the
// environment (-E), never on the command line where ps shows it.
func (c *ipmiClient) run(ctx context.Context, op string, args ...string) (string, error) {
	var out string
	err := c.call(ctx, op, func(ctx context.Context) error {
		cmd, err := c.command(ctx, args...)
		if err != nil {
			return err
		}
		b, err := cmd.CombinedOutput()
		out = strings.TrimSpace(string(b))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return c.explain(out, err)
		}
		if failedOutput(out) {
			return c.explain(out, nil)
		}
		return nil
	})
	return out, err
}

// command is ipmitool with the BMC's address and credentials before args.
func (c *ipmiClient) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	host := c.host
	if restricted() {
		// ipmitool gets the address that was checked, not a name it
		// would resolve again.
		addrs, err := checkHost(ctx, c.host)
		if err != nil {
			return nil, err
		}
		host = addrs[0].String()
	}
	full := []string{"-I", c.iface, "-H", host, "-p", c.port, "-L", c.priv, "-N", "1", "-R", "3"}
	if c.user != "" {
		full = append(full, "-U", c.user)
	}
	if c.iface == "lanplus" {
		full = append(full, "-C", c.cipher)
	}
	full = append(full, "-E")
	cmd := exec.CommandContext(ctx, "ipmitool", append(full, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "IPMI_PASSWORD=" + c.pass}
	return cmd, nil
}

// explain classifies ipmitool's words, which are all it gives.
func (c *ipmiClient) explain(out string, err error) error {
	low := strings.ToLower(out)
	e := &Error{Where: c.where, Detail: truncate(mask(out, c.secrets), 300)}
	switch {
	case errors.Is(err, exec.ErrNotFound):
		e.Kind, e.Reason, e.Detail = ErrUnsupported, "ipmitool is not installed on the conductor", ""
	case strings.Contains(low, "rakp") || strings.Contains(low, "unauthorized name") || strings.Contains(low, "invalid user name") ||
		strings.Contains(low, "password") || strings.Contains(low, "authentication"):
		e.Kind = ErrAuth
	case strings.Contains(low, "invalid command") || strings.Contains(low, "not supported") || strings.Contains(low, "command not supported"):
		e.Kind = ErrUnsupported
	case strings.Contains(low, "unable to establish"):
		// ipmitool says the same for a wrong password and a dead port;
		// tell them apart by whether the port answers a presence ping.
		if c.answers() {
			e.Kind = ErrAuth
		} else {
			e.Kind, e.Reason = ErrUnreachable, "unreachable"
		}
	default:
		e.Kind, e.Said = ErrBMC, truncate(mask(out, c.secrets), 200)
		e.Detail = ""
	}
	return e
}

// answers probes the BMC's UDP port with an RMCP presence ping.
func (c *ipmiClient) answers() bool {
	conn, err := net.DialTimeout("udp", c.where, time.Second)
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

func (c *ipmiClient) PowerState(ctx context.Context) (string, error) {
	out, err := c.run(ctx, "reading power state", "chassis", "power", "status")
	if err != nil {
		return "", err
	}
	low := strings.ToLower(out)
	switch {
	case strings.HasSuffix(low, "is off"):
		return PowerOff, nil
	case strings.HasSuffix(low, "is on"):
		return PowerOn, nil
	}
	return "", &Error{Op: "reading power state", Where: c.where, Kind: ErrBMC, Reason: "unexpected answer",
		Said: truncate(mask(out, c.secrets), 80)}
}

func (c *ipmiClient) SetPower(ctx context.Context, target string) error {
	cmd := map[string]string{PowerOn: "on", PowerOff: "off", SoftPowerOff: "soft"}[target]
	if cmd == "" {
		return errUnsupported("setting power "+target, c.where)
	}
	_, err := c.run(ctx, "setting power "+target, "chassis", "power", cmd)
	return err
}

// Restart is not IPMI's chassis reset: Ironic's ipmitool driver reboots
// by powering off, waiting until the BMC reports off, then powering on
// and waiting for on, so each half is confirmed (a reset that a BMC
// acknowledges and then ignores would pass unseen). Power does that when
// Restart is unsupported; a soft reboot likewise, with a soft power off.
func (c *ipmiClient) Restart(ctx context.Context, soft bool) error {
	return errUnsupported("rebooting in one command", c.where)
}

// failedOutput tells whether ipmitool reported a failure while exiting
// with status 0, as it does for a refused chassis boot parameter ("Set
// Chassis Boot Parameter 5 failed: Unspecified error").
func failedOutput(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		low := strings.ToLower(strings.TrimSpace(l))
		if strings.Contains(low, " failed:") || strings.HasPrefix(low, "error") || strings.HasPrefix(low, "unable to") {
			return true
		}
	}
	return false
}

// BootDevice reads boot parameter 5 (boot flags), as Ironic's ipmitool
// driver does.
func (c *ipmiClient) BootDevice(ctx context.Context) (Boot, error) {
	out, err := c.run(ctx, "reading the boot device", "chassis", "bootparam", "get", "5")
	if err != nil {
		return Boot{}, err
	}
	var b Boot
	_, sel, _ := strings.Cut(out, "Boot Device Selector : ")
	sel, _, _ = strings.Cut(sel, "\n")
	switch {
	case strings.Contains(sel, "PXE"):
		b.Device = "pxe"
	case strings.Contains(sel, "Hard-Drive") && strings.Contains(sel, "Safe-Mode"):
		b.Device = "safe"
	case strings.Contains(sel, "Hard-Drive"):
		b.Device = "disk"
	case strings.Contains(sel, "BIOS"):
		b.Device = "bios"
	case strings.Contains(sel, "CD/DVD"):
		b.Device = "cdrom"
	}
	persistent := strings.Contains(out, "Options apply to all future boots")
	b.Persistent = &persistent
	return b, nil
}

func (c *ipmiClient) SetBootDevice(ctx context.Context, device string, persistent bool, mode string) error {
	dev := map[string]string{"pxe": "pxe", "disk": "disk", "cdrom": "cdrom", "bios": "bios", "safe": "safe"}[device]
	if dev == "" {
		return errUnsupported("setting boot device "+device, c.where)
	}
	args := []string{"chassis", "bootdev", dev}
	var opts []string
	if persistent {
		opts = append(opts, "persistent")
	}
	if mode == "uefi" {
		opts = append(opts, "efiboot")
	}
	if len(opts) > 0 {
		args = append(args, "options="+strings.Join(opts, ","))
	}
	_, err := c.run(ctx, "setting boot device "+device, args...)
	return err
}

// ResetBMC asks for a warm reset and, from a BMC that does not support
// one (ipmi_sim answers "Invalid command"), a cold reset, as Ironic's
// bmc_reset offers both.
func (c *ipmiClient) ResetBMC(ctx context.Context) error {
	_, err := c.run(ctx, "resetting the BMC", "mc", "reset", "warm")
	if errors.Is(err, ErrUnsupported) {
		_, err = c.run(ctx, "resetting the BMC (cold)", "mc", "reset", "cold")
	}
	return err
}

func (c *ipmiClient) Close() {}
