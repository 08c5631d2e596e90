package bmc

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Address is what one BMC address URL says, as metal3 and OpenShift's
// "Add host" take a BMC: the scheme picks the driver (and the bmclib
// provider, or a virtual-media boot), the rest is where the BMC is.
type Address struct {
	Driver string
	// Provider is the bmclib provider, for the bmclib driver.
	Provider string
	// Info holds the driver_info keys the address gives.
	Info map[string]any
	// Boot is the boot interface the scheme asks for ("": the driver's
	// default).
	Boot string
}

// redfishSchemes are the schemes that mean Anvil's redfish driver, with
// the boot interface each asks for. Ironic's idrac hardware type drives
// iDRACs through the same Redfish interfaces now that WSMAN is gone, so
// idrac:// is the redfish driver here too.
var redfishSchemes = map[string]string{
	"redfish": "", "redfish-virtualmedia": "redfish-virtual-media",
	"idrac": "", "idrac-redfish": "", "idrac-virtualmedia": "redfish-virtual-media",
}

// AddressSchemes lists the schemes ParseAddress takes, for the form's
// help and for refusals.
func AddressSchemes() []string {
	out := []string{"ipmi", "redfish", "redfish-virtualmedia", "idrac", "idrac-redfish", "idrac-virtualmedia"}
	for _, p := range BmclibProviders() {
		if p == "rpc" {
			out = append(out, "bmclib+rpc+https")
			continue
		}
		out = append(out, "bmclib+"+p)
	}
	return append(out, "fake-hardware")
}

// ParseAddress reads a BMC address URL: ipmi://host[:port];
// redfish://host[:port][/redfish/v1/Systems/ID] (https unless the scheme
// ends +http), likewise redfish-virtualmedia://, idrac://,
// idrac-redfish:// and idrac-virtualmedia://; bmclib+PROVIDER://host[:port]
// for a bmclib provider, and bmclib+rpc+https://webhook/path for rpc's
// webhook; fake-hardware:// for a machine nothing drives. A refusal is a
// sentence about the address; whether the host is allowed is
// Validate's.
func ParseAddress(s string) (*Address, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("give the BMC's address, such as redfish://10.0.0.5/redfish/v1/Systems/1 or ipmi://10.0.0.5")
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, fmt.Errorf("start the address with the BMC's protocol, such as redfish://%s or ipmi://%s", s, s)
	}
	scheme = strings.ToLower(scheme)
	if scheme == "fake-hardware" {
		return &Address{Driver: "fake-hardware", Info: map[string]any{}}, nil
	}
	u, err := url.Parse("x://" + rest)
	if err != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("%q has no host name or IP address after %s://", s, scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("the user name and password go in their own fields, not in the address")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %q is not a number from 1 to 65535", p)
		}
	}
	base, transport, _ := strings.Cut(scheme, "+")
	if base == "bmclib" {
		return parseBmclib(transport, u)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("queries and fragments do not belong in a BMC address")
	}
	if base == "ipmi" && transport == "" {
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("an IPMI address has no path: ipmi://host or ipmi://host:port")
		}
		a := &Address{Driver: "ipmi", Info: map[string]any{"ipmi_address": u.Hostname()}}
		if p := u.Port(); p != "" {
			n, _ := strconv.Atoi(p)
			a.Info["ipmi_port"] = n
		}
		return a, nil
	}
	boot, known := redfishSchemes[base]
	if !known || (transport != "" && transport != "http" && transport != "https") {
		return nil, fmt.Errorf("there is no driver for %s:// in Anvil; use one of %s", scheme, strings.Join(AddressSchemes(), "://, ")+"://")
	}
	if transport == "" {
		transport = "https"
	}
	a := &Address{Driver: "redfish", Boot: boot, Info: map[string]any{"redfish_address": transport + "://" + u.Host}}
	switch path := strings.TrimSuffix(u.Path, "/"); {
	case path == "" || path == "/redfish/v1":
	case strings.HasPrefix(path, "/redfish/v1/Systems/") && !strings.Contains(strings.TrimPrefix(path, "/redfish/v1/Systems/"), "/"):
		a.Info["redfish_system_id"] = path
	default:
		return nil, fmt.Errorf("the path %q is not a system's: give none, or one such as /redfish/v1/Systems/1", u.Path)
	}
	return a, nil
}

// parseBmclib reads bmclib+PROVIDER://host[:port], and rpc's
// bmclib+rpc+http(s)://webhook.
func parseBmclib(transport string, u *url.URL) (*Address, error) {
	provider, web, _ := strings.Cut(transport, "+")
	if !slices.Contains(BmclibProviders(), provider) {
		return nil, fmt.Errorf("bmclib has no provider %q; use bmclib+PROVIDER:// with one of %s", provider, strings.Join(BmclibProviders(), ", "))
	}
	a := &Address{Driver: "bmclib", Provider: provider, Info: map[string]any{"bmclib_provider": provider}}
	if provider == "rpc" {
		if web != "http" && web != "https" {
			return nil, fmt.Errorf("name the webhook's protocol: bmclib+rpc+https://host/path (or +http)")
		}
		hook := *u
		hook.Scheme = web
		a.Info["bmclib_rpc_url"] = hook.String()
		return a, nil
	}
	if web != "" {
		return nil, fmt.Errorf("bmclib+%s takes no +%s: use bmclib+%s://host[:port]", provider, web, provider)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("a bmclib %s address has no path: bmclib+%s://host or bmclib+%s://host:port", provider, provider, provider)
	}
	a.Info["bmclib_address"] = u.Hostname()
	if p := u.Port(); p != "" {
		n, _ := strconv.Atoi(p)
		a.Info["bmclib_port"] = n
	}
	return a, nil
}

// LoginKeys are the driver_info keys that take the address's user name
// and password (for bmclib's rpc, its webhook secret); "" where the
// driver has none.
func (a *Address) LoginKeys() (user, secret string) {
	switch {
	case a.Driver == "ipmi" || a.Driver == "redfish":
		return a.Driver + "_username", a.Driver + "_password"
	case a.Driver == "bmclib" && a.Provider == "rpc":
		return "", "bmclib_rpc_secret"
	case a.Driver == "bmclib":
		return "bmclib_username", "bmclib_password"
	}
	return "", ""
}

// AddressKeys are the driver_info keys some address sets, so a problem
// with one of them (outside the BMC networks, say) is the address's.
func AddressKeys() []string {
	return []string{"ipmi_address", "ipmi_port", "redfish_address", "redfish_system_id", "bmclib_provider", "bmclib_address", "bmclib_port", "bmclib_rpc_url"}
}
