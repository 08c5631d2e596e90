// Package bmc is Anvil's door to baseboard management controllers: the
// drivers it knows, validation of their driver_info, and which keys hold
// secrets.
package bmc

import (
	"fmt"
	"net"
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
)

type key struct {
	name     string
	kind     kind
	required bool
}

// drivers lists each driver's driver_info keys, named as Ironic names
// them so existing enrolment files work unchanged. Keys not listed are
// kept as given: Ironic stores deploy and boot settings there too.
var drivers = map[string][]key{
	"fake": nil,
	"ipmi": {
		{"ipmi_address", kHost, true},
		{"ipmi_port", kPort, false},
		{"ipmi_username", kString, false},
		{"ipmi_password", kString, false},
		{"ipmi_cipher_suite", kCipher, false},
	},
	"redfish": {
		{"redfish_address", kURL, true},
		{"redfish_system_id", kString, false},
		{"redfish_username", kString, false},
		{"redfish_password", kString, false},
		{"redfish_verify_ca", kBoolOrPath, false},
	},
}

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

// Validate checks info for driver and returns a *FieldError naming the
// first problem.
func Validate(driver string, info map[string]any) error {
	keys, ok := drivers[driver]
	if !ok {
		return &FieldError{Field: "driver", Msg: fmt.Sprintf("unknown driver %q; one of %s", driver, strings.Join(Drivers(), ", "))}
	}
	if len(info) > 100 {
		return &FieldError{Field: "driver_info", Msg: "driver_info has more than 100 keys"}
	}
	for _, k := range keys {
		v, present := info[k.name]
		if !present || v == nil {
			if k.required {
				return fieldErr(k.name, "driver %s requires driver_info/%s", driver, k.name)
			}
			continue
		}
		if err := check(k, v); err != nil {
			return err
		}
	}
	for k, v := range info {
		if s, ok := v.(string); ok && len(s) > 4096 {
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
	case kBoolOrPath:
		if _, ok := v.(bool); ok {
			return nil
		}
		if isString && s != "" {
			return nil
		}
		return fieldErr(k.name, "driver_info/%s must be true, false or a CA bundle path", k.name)
	}
	if !isString || strings.TrimSpace(s) == "" {
		return fieldErr(k.name, "driver_info/%s must be a non-empty string", k.name)
	}
	switch k.kind {
	case kHost:
		if strings.ContainsAny(s, " /\\\t\n") || (net.ParseIP(s) == nil && !validHostname(s)) {
			return fieldErr(k.name, "driver_info/%s %q is not a host name or IP address", k.name, s)
		}
	case kURL:
		target := s
		if !strings.Contains(s, "://") {
			target = "https://" + s
		}
		u, err := url.Parse(target)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fieldErr(k.name, "driver_info/%s %q is not an http(s) address", k.name, s)
		}
	}
	return nil
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
