// Package bmc is Anvil's door to baseboard management controllers: the
// drivers it knows, validation of their driver_info, and which keys hold
// secrets.
package bmc

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// FieldError is a driver_info problem that names the offending field, in
// the API's path form (driver_info/ipmi_address).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Msg }

func fieldErr(key, format string, a ...any) *FieldError {
	return &FieldError{Field: "driver_info/" + key, Msg: fmt.Sprintf(format, a...)}
}

// A key kind says how a driver_info value is checked.
type kind int

const (
	kHost kind = iota
	kPort
	kString
	kCipher
	kURL
	kBoolOrPath
	kEnum
	kWebhook
)

type key struct {
	name     string
	kind     kind
	required bool
	// atUse is a required key a node may be stored without, as Ironic
	// stores an ipmi node without ipmi_address and refuses it only at
	// validate and when its BMC is used; missing is then Ironic's
	// message for it.
	atUse   bool
	missing string
	values  []string // kEnum
	// desc is what GET /v1/drivers/{name}/properties says about the key,
	// in Ironic's words where Ironic has the key.
	desc string
}

// drivers lists each driver's driver_info keys, named as Ironic names
// them so existing enrolment files work unchanged (the README's
// Conductor section says what each does). Keys not listed are kept as
// given: Ironic stores deploy and boot settings there too.
var drivers = map[string][]key{
	"fake-hardware": nil,
	"ipmi": {
		{name: "ipmi_address", kind: kHost, required: true, atUse: true, missing: "Missing the following IPMI credentials in node's driver_info: ['ipmi_address'].",
			desc: "IP address or hostname of the node. Required."},
		{name: "ipmi_port", kind: kPort, desc: "remote IPMI RMCP port. Optional."},
		{name: "ipmi_username", kind: kString, desc: "username; default is NULL user. Optional."},
		{name: "ipmi_password", kind: kString, desc: "password. Optional."},
		{name: "ipmi_cipher_suite", kind: kCipher, desc: "The number of a cipher suite to use. Only 3 (AES-128 with SHA1) or 17 (AES-128 with SHA256) should ever be used; 17 is preferred. The default value depends on the ipmitool version, some recent versions have switched from 3 to 17."},
		{name: "ipmi_protocol_version", kind: kEnum, values: []string{"2.0", "1.5"}, desc: `the version of the IPMI protocol; default is "2.0". One of "1.5", "2.0". Optional.`},
		{name: "ipmi_priv_level", kind: kEnum, values: []string{"ADMINISTRATOR", "OPERATOR", "USER", "CALLBACK"}, desc: "privilege level; default is ADMINISTRATOR. One of ADMINISTRATOR, CALLBACK, OPERATOR, USER. Optional."},
		{name: "ipmi_terminal_port", kind: kPort, desc: "node's UDP port to connect to. Only required for console access."},
	},
	"redfish": {
		{name: "redfish_address", kind: kURL, required: true, desc: "The URL address to the Redfish controller. It must include the authority portion of the URL. If the scheme is missing, https is assumed. For example: https://mgmt.vendor.com. If a path is added, it will be used as the API endpoint root_prefix. Required"},
		{name: "redfish_system_id", kind: kString, desc: "The canonical path to the ComputerSystem resource that the driver will interact with. It should include the root service, version and the unique resource path to a ComputerSystem within the same authority as the redfish_address property. For example: /redfish/v1/Systems/1. This property is only required if target BMC manages more than one ComputerSystem. Otherwise the only available ComputerSystem is picked automatically."},
		{name: "redfish_username", kind: kString, desc: "User account with admin/server-profile access privilege. Although this property is not mandatory it's highly recommended to set a username. Optional"},
		{name: "redfish_password", kind: kString, desc: "User account password. Although this property is not mandatory, it's highly recommended to set a password. Optional"},
		{name: "redfish_verify_ca", kind: kBoolOrPath, desc: "Either a Boolean value, a PEM CA bundle, or a path to a CA_BUNDLE file. If set to True the driver will verify the host certificates; if False the driver will ignore verifying the SSL certificate. If it's a PEM bundle or a path the driver will use the specified certificate bundle; a path is accepted from system-scope callers only, under the operator's --bmc-ca-dir. Defaults to True. Optional"},
		{name: "redfish_auth_type", kind: kEnum, values: []string{"auto", "session", "basic"}, desc: `Redfish HTTP client authentication method. Can be "basic", "session" or "auto". Optional`},
	},
	// bmclib: Anvil's keys (Ironic has no such hardware type); which
	// provider needs which is validateBmclib's.
	"bmclib": {
		{name: "bmclib_provider", kind: kEnum, required: true, values: BmclibProviders(), desc: bmclibProviderDesc()},
		{name: "bmclib_address", kind: kHost, desc: "IP address or host name of the BMC (for rpc, the machine's name the webhook is told; optional there). Required for every provider but rpc."},
		{name: "bmclib_port", kind: kPort, desc: "The BMC's port; default 623 for ipmitool, 16992 for intelamt, 8123 for homeassistant, 443 otherwise (dell, supermicro and openbmc only connect to 443). Optional."},
		{name: "bmclib_username", kind: kString, desc: "BMC user name. Optional."},
		{name: "bmclib_password", kind: kString, desc: "BMC password (for homeassistant, its long-lived access token). Optional."},
		{name: "bmclib_verify_ca", kind: kBoolOrPath, desc: "Either a Boolean value, a PEM CA bundle, or a path to a CA_BUNDLE file under the operator's --bmc-ca-dir (system-scope callers only). True, the default, verifies against the system's CAs. Optional."},
		{name: "bmclib_rpc_url", kind: kWebhook, desc: "rpc: the http(s) URL of the webhook every request is POSTed to, signed with HMAC-SHA256 (X-BMCLIB-Signature-256). Required for rpc."},
		{name: "bmclib_rpc_secret", kind: kString, desc: "rpc: the HMAC-SHA256 secret the requests are signed with. Required for rpc."},
		{name: "bmclib_system_name", kind: kString, desc: "redfish: the Name of the ComputerSystem to drive, needed when the BMC has more than one (bmclib matches by Name only). Optional."},
		{name: "bmclib_homeassistant_switch", kind: kString, desc: "homeassistant: the entity ID of the switch that powers the machine (switch.rack1_node7: switch. then lower-case letters, digits and underscores), reached over https at bmclib_address. Required for homeassistant."},
	},
}

// A binding is a group of driver_info keys that together say where, and
// as whom, Anvil logs in, and the secrets it sends there. Whoever changes
// a binding key decides where the stored secret goes next, so the change
// is taken only with the secret itself (see Bindings).
type Binding struct {
	Keys    []string
	Secrets []string
}

// bindings lists, per driver, the keys that bind its secrets; an address
// counts as its whole value, scheme, port and path included, and so does
// a key that picks which machine behind it the secret acts on (as
// redfish_system_id does): one BMC, webhook or Home Assistant commonly
// serves many machines, of several projects. bmclib's keys are listed
// before Anvil reads them so its driver lands with them already bound;
// its provider binds too, since it decides the protocol the password is
// sent in. bmclib_address is the machine an rpc webhook is told to act
// on, so it binds the rpc secret as well.
var bindings = map[string][]Binding{
	"redfish": {{Keys: []string{"redfish_address", "redfish_system_id", "redfish_username"}, Secrets: []string{"redfish_password"}}},
	"ipmi":    {{Keys: []string{"ipmi_address", "ipmi_port", "ipmi_username"}, Secrets: []string{"ipmi_password"}}},
	"bmclib": {
		{Keys: []string{"bmclib_provider", "bmclib_address", "bmclib_port", "bmclib_username", "bmclib_system_name", "bmclib_homeassistant_switch"}, Secrets: []string{"bmclib_password"}},
		{Keys: []string{"bmclib_rpc_url", "bmclib_address"}, Secrets: []string{"bmclib_rpc_secret"}},
	},
}

// Bindings returns every driver's bindings, whatever a node's driver:
// keys of another driver stay stored across a driver change, and the
// secret they bind must not follow them anywhere either.
func Bindings() []Binding {
	var out []Binding
	for _, d := range slices.Sorted(maps.Keys(bindings)) {
		out = append(out, bindings[d]...)
	}
	return out
}

// aliases are other names a driver answers to. "fake" is what Anvil
// called its fake driver before it spelled drivers as Ironic does;
// nodes and scripts that use it keep working, and keep the name they
// were given.
var aliases = map[string]string{"fake": "fake-hardware"}

// Canonical returns Ironic's name for driver, resolving aliases; an
// unknown name comes back unchanged.
func Canonical(driver string) string {
	if c, ok := aliases[driver]; ok {
		return c
	}
	return driver
}

// Spellings returns every name that means driver: its Ironic name and
// its aliases, so a filter by either finds nodes stored under both.
func Spellings(driver string) []string {
	c := Canonical(driver)
	out := []string{c}
	for a, to := range aliases {
		if to == c {
			out = append(out, a)
		}
	}
	return out
}

// Known reports whether driver (or an alias of it) is a driver Anvil has.
func Known(driver string) bool {
	_, ok := drivers[Canonical(driver)]
	return ok
}

// interfaceProperties are properties a driver's default interfaces
// report beyond its driver_info keys: Ironic's fake-hardware reports its
// default vendor interface's (FakeVendorB), which configure nothing, and
// clients and tempest expect to see them.
var interfaceProperties = map[string]map[string]string{
	"fake-hardware": {"B1": "B1 description. Required.", "B2": "B2 description. Required."},
}

// Properties maps each driver_info key driver reads to its description,
// as GET /v1/drivers/{name}/properties shows them.
func Properties(driver string) map[string]string {
	out := map[string]string{}
	for _, k := range drivers[Canonical(driver)] {
		out[k.name] = k.desc
	}
	for k, v := range interfaceProperties[Canonical(driver)] {
		out[k] = v
	}
	return out
}

// bootDevices are the devices each driver can set; anything else is a
// 400 before any BMC is contacted.
var bootDevices = map[string][]string{
	"fake-hardware": {"pxe", "disk", "cdrom", "bios", "safe"},
	"ipmi":          {"pxe", "disk", "cdrom", "bios", "safe"},
	"redfish":       {"pxe", "disk", "cdrom", "bios", "uefihttp"},
}

// BootDevices lists the boot devices a node of driver with driver_info
// info can set; for bmclib, its provider's.
func BootDevices(driver string, info map[string]any) []string {
	if Canonical(driver) == "bmclib" {
		return bmclibBootDevicesOf(str(info, "bmclib_provider"))
	}
	return slices.Clone(bootDevices[Canonical(driver)])
}

// PowerTargetsOf lists the power targets a node of driver with
// driver_info info takes; for bmclib, its provider's.
func PowerTargetsOf(driver string, info map[string]any) []string {
	if Canonical(driver) == "bmclib" {
		return bmclibPowerTargets(str(info, "bmclib_provider"))
	}
	return slices.Clone(PowerTargets)
}

// DriverName names a node's driver as errors should: with the bmclib
// provider, which decides what a bmclib node can do.
func DriverName(driver string, info map[string]any) string {
	if p := str(info, "bmclib_provider"); Canonical(driver) == "bmclib" && p != "" {
		return fmt.Sprintf("driver %s with bmclib provider %s", driver, p)
	}
	return "driver " + driver
}

// AllBootDevices lists every boot device some driver can set.
func AllBootDevices() []string { return append(BootDevices("ipmi", nil), "uefihttp") }

// Drivers returns the driver names, sorted.
func Drivers() []string {
	out := make([]string, 0, len(drivers))
	for d := range drivers {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// IsSecretKey reports whether a driver_info key holds a credential that
// must never be shown, logged or returned.
func IsSecretKey(k string) bool {
	k = strings.ToLower(k)
	return strings.HasSuffix(k, "password") || strings.HasSuffix(k, "_key") || strings.Contains(k, "secret") || strings.HasSuffix(k, "token")
}

// Validate checks info for driver, to use it, and returns a *FieldError
// naming the first problem.
func Validate(driver string, info map[string]any) error {
	return validate(driver, info, true)
}

// ValidateStored is Validate for a node being created or updated: a
// required key that Ironic checks only at validate and use (atUse) may
// be absent.
func ValidateStored(driver string, info map[string]any) error {
	return validate(driver, info, false)
}

func validate(driver string, info map[string]any, use bool) error {
	keys, ok := drivers[Canonical(driver)]
	if !ok {
		return &FieldError{Field: "driver", Msg: fmt.Sprintf("unknown driver %q; one of %s", driver, strings.Join(Drivers(), ", "))}
	}
	if len(info) > 100 {
		return &FieldError{Field: "driver_info", Msg: "driver_info has more than 100 keys"}
	}
	for _, k := range keys {
		v, present := info[k.name]
		if !present || v == nil {
			switch {
			case k.required && k.atUse && !use:
			case k.required && k.missing != "":
				return fieldErr(k.name, "%s", k.missing)
			case k.required:
				return fieldErr(k.name, "driver %s requires driver_info/%s", driver, k.name)
			}
			continue
		}
		if err := check(k, v); err != nil {
			return err
		}
	}
	if Canonical(driver) == "bmclib" {
		if err := validateBmclib(info); err != nil {
			return err
		}
	}
	for k, v := range info {
		if s, ok := v.(string); ok && len(s) > 4096 && !(isInlinePEM(s) && slices.ContainsFunc(keys, func(x key) bool { return x.name == k && x.kind == kBoolOrPath })) {
			return fieldErr(k, "driver_info/%s is longer than 4096 characters", k)
		}
	}
	return nil
}

func check(k key, v any) error {
	s, isString := v.(string)
	switch k.kind {
	case kPort, kCipher:
		n, err := asInt(v)
		lo, hi := 1, 65535
		if k.kind == kCipher {
			lo, hi = 0, 17
		}
		if err != nil || n < lo || n > hi {
			return fieldErr(k.name, "driver_info/%s must be an integer from %d to %d, got %v", k.name, lo, hi, v)
		}
		return nil
	case kEnum:
		if !isString || !slices.Contains(k.values, s) {
			return fieldErr(k.name, "driver_info/%s must be one of %s, got %v", k.name, strings.Join(k.values, ", "), v)
		}
		return nil
	case kBoolOrPath:
		if _, ok := v.(bool); ok {
			return nil
		}
		switch {
		case !isString:
		case isInlinePEM(s):
			if len(s) > MaxInlineCABytes {
				return fieldErr(k.name, "driver_info/%s is a PEM bundle larger than %d bytes", k.name, MaxInlineCABytes)
			}
			if _, err := parseCAs([]byte(s)); err != nil {
				return fieldErr(k.name, "driver_info/%s: the PEM bundle %v", k.name, err)
			}
			return nil
		case strings.EqualFold(s, "true"), strings.EqualFold(s, "false"), strings.HasPrefix(s, "/"):
			// Who may give a path, and which, is CheckPaths's question.
			return nil
		}
		return fieldErr(k.name, "driver_info/%s must be true, false or a PEM CA bundle", k.name)
	}
	if !isString || strings.TrimSpace(s) == "" {
		return fieldErr(k.name, "driver_info/%s must be a non-empty string", k.name)
	}
	switch k.kind {
	case kHost:
		if strings.ContainsAny(s, " /\\\t\n") || (net.ParseIP(s) == nil && !validHostname(s)) {
			return fieldErr(k.name, "driver_info/%s %q is not a host name or IP address", k.name, s)
		}
		return checkEnrolHost(k.name, s)
	case kWebhook:
		return checkWebhook(k, s)
	case kURL:
		u, err := ParseRedfishAddress(s)
		if err != nil {
			return fieldErr(k.name, "driver_info/%s %q is not an http(s) address: %v", k.name, s, err)
		}
		return checkEnrolHost(k.name, u.Hostname())
	}
	return nil
}

// ParseRedfishAddress reads redfish_address as Ironic does: https when
// no scheme is given; an IPv6 address may come bare or in brackets; a
// path is kept as a prefix before /redfish/v1.
func ParseRedfishAddress(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		if a, err := netip.ParseAddr(s); err == nil && a.Is6() {
			s = "[" + s + "]"
		}
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("no host")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("credentials, queries and fragments do not belong in the address")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %q is not 1-65535", p)
		}
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/redfish/v1")
	return u, nil
}

func asInt(v any) (int, error) {
	switch n := v.(type) {
	case float64:
		if n != float64(int(n)) {
			return 0, fmt.Errorf("not an integer")
		}
		return int(n), nil
	case int:
		return n, nil
	case string:
		return strconv.Atoi(n)
	}
	return 0, fmt.Errorf("not a number")
}

func validHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Interface is one hardware interface of a driver, named as Ironic
// names its implementations.
type Interface struct {
	Type    string   // power, management, raid, …
	Default string   // "" when the driver has none
	Enabled []string // empty when the driver has none
}

// InterfaceTypes are Ironic's hardware interface types, each a node's
// <type>_interface field.
var InterfaceTypes = []string{"bios", "boot", "console", "deploy", "firmware", "inspect", "management",
	"network", "power", "raid", "rescue", "storage", "vendor"}

// interfaces lists, per driver and interface type, the implementations a
// node of that driver may use, its default first. They are Ironic's
// implementations for the hardware type that its default configuration
// enables (fake-hardware with Ironic's fake ones, as devstack enables
// them), so nodes enrolled for Ironic keep their interface names. Anvil
// drives power, management and the reserved steps itself, and each boot
// and deploy implementation does what its name says (conductor's
// deployMode, agentBoot): direct and custom-agent boot the ramdisk agent
// by ipxe, pxe or virtual media; ramdisk boots instance_info.boot_iso by
// virtual media. network is noop by default:
// Anvil has no DHCP provider for flat networking; storage is noop by
// default, as Ironic's default_storage_interface. console is no-console
// by default, as Ironic's default_console_interface; ipmitool-socat is
// Anvil's own listener (conductor/console.go).
var interfaces = map[string]map[string][]string{
	"fake-hardware": {
		"bios": {"fake", "no-bios"}, "boot": {"fake", "ipxe", "pxe"}, "console": {"fake", "no-console"},
		"deploy": {"fake", "direct", "ramdisk", "custom-agent"}, "firmware": {"fake", "no-firmware"},
		"inspect": {"fake", "no-inspect"}, "management": {"fake"}, "network": {"noop", "flat"},
		"power": {"fake"}, "raid": {"fake", "no-raid", "agent"}, "rescue": {"fake", "no-rescue"},
		"storage": {"noop", "fake"}, "vendor": {"fake", "no-vendor"},
	},
	"ipmi": {
		"bios": {"no-bios"}, "boot": {"ipxe", "pxe"}, "console": {"no-console", "ipmitool-socat"},
		"deploy": {"direct", "ramdisk", "custom-agent"}, "firmware": {"no-firmware"}, "inspect": {"no-inspect", "agent"},
		"management": {"ipmitool"}, "network": {"noop", "flat"}, "power": {"ipmitool"},
		"raid": {"no-raid", "agent"}, "rescue": {"no-rescue", "agent"}, "storage": {"noop"},
		"vendor": {"ipmitool", "no-vendor"},
	},
	"redfish": {
		"bios": {"redfish", "no-bios"}, "boot": {"ipxe", "pxe", "redfish-virtual-media"}, "console": {"no-console"},
		"deploy": {"direct", "ramdisk", "custom-agent"}, "firmware": {"redfish", "no-firmware"}, "inspect": {"redfish", "no-inspect", "agent"},
		"management": {"redfish"}, "network": {"noop", "flat"}, "power": {"redfish"},
		"raid": {"redfish", "no-raid", "agent"}, "rescue": {"no-rescue", "agent"}, "storage": {"noop"},
		"vendor": {"redfish", "no-vendor"},
	},
	// bmclib: power and management through the provider; a provider
	// that sets the boot device network-boots the ramdisk agent for
	// cleaning and deploys (pxe, ipxe); everything else is absent.
	"bmclib": {
		"bios": {"no-bios"}, "boot": {"pxe", "ipxe"}, "console": {"no-console"},
		"deploy": {"direct", "custom-agent"}, "firmware": {"no-firmware"}, "inspect": {"no-inspect"},
		"management": {"bmclib"}, "network": {"noop"}, "power": {"bmclib"},
		"raid": {"no-raid"}, "rescue": {"no-rescue"}, "storage": {"noop"},
		"vendor": {"no-vendor"},
	},
}

// Interfaces lists driver's interfaces, every one Ironic has, with the
// enabled implementations and the default.
func Interfaces(driver string) []Interface {
	impls := interfaces[Canonical(driver)]
	out := make([]Interface, len(InterfaceTypes))
	for i, t := range InterfaceTypes {
		out[i] = Interface{Type: t, Default: DefaultInterface(driver, t), Enabled: slices.Clone(impls[t])}
	}
	return out
}

// DefaultInterface is the implementation a node of driver gets for
// interface type t when none is given.
func DefaultInterface(driver, t string) string {
	if impls := interfaces[Canonical(driver)][t]; len(impls) > 0 {
		return impls[0]
	}
	return ""
}

// CheckInterface reports whether driver offers impl for interface type t,
// naming the field and the implementations it does offer when not.
func CheckInterface(driver, t, impl string) error {
	impls := interfaces[Canonical(driver)][t]
	if slices.Contains(impls, impl) {
		return nil
	}
	// Ironic's IncompatibleInterface sentence, then what would do.
	return &FieldError{Field: t + "_interface", Msg: fmt.Sprintf("%s interface implementation '%s' is not supported by hardware type %s. Valid %s_interface values: %s.",
		t, impl, Canonical(driver), t, strings.Join(impls, ", "))}
}
