package nodes

import (
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/anvilproject/anvil/server/errs"
)

// Provision states, with Ironic's names.
const (
	StateEnroll        = "enroll"
	StateVerifying     = "verifying"
	StateManageable    = "manageable"
	StateAvailable     = "available"
	StateActive        = "active"
	StateCleaning      = "cleaning"
	StateCleanWait     = "clean wait"
	StateCleanFailed   = "clean failed"
	StateServicing     = "servicing"
	StateServiceWait   = "service wait"
	StateServiceFailed = "service failed"
	StateError         = "error"
)

// deletable are the states from which a node may be removed: nothing is
// running on it and no workload depends on it.
var deletable = map[string]bool{
	StateEnroll: true, StateManageable: true, StateAvailable: true,
	StateCleanFailed: true, StateError: true,
}

const (
	maxNameLen    = 255
	maxProjectLen = 255
	maxTraits     = 50 // as Ironic's MAX_TRAITS_PER_NODE
	maxTraitLen   = 255
)

// A logical name is made of RFC 3986 unreserved characters, as Ironic
// requires from API version 1.10 on.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9\-._~]+$`)

// IsUUID reports whether s is a canonical UUID.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}

// ValidateName checks a node (or runbook, allocation) name.
func ValidateName(field, name string) error {
	switch {
	case name == "":
		return errs.BadRequest(field, "%s may not be empty; remove it instead", field)
	case len(name) > maxNameLen:
		return errs.BadRequest(field, "%s is %d characters long; at most %d are allowed", field, len(name), maxNameLen)
	case !nameRE.MatchString(name):
		return errs.BadRequest(field, "%s %q is not a valid name: use letters, digits and - . _ ~ only", field, name)
	case IsUUID(name):
		return errs.BadRequest(field, "%s %q looks like a UUID; names must not, so they can be told apart", field, name)
	}
	return nil
}

// ValidateProject checks an owner or lessee value.
func ValidateProject(field, p string) error {
	switch {
	case len(p) > maxProjectLen:
		return errs.BadRequest(field, "%s is %d characters long; at most %d are allowed", field, len(p), maxProjectLen)
	case strings.TrimSpace(p) != p || strings.ContainsAny(p, "\x00\r\n\t"):
		return errs.BadRequest(field, "%s %q has surrounding spaces or control characters", field, p)
	}
	return nil
}

var conductorGroupRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]*$`)

// ValidateConductorGroup checks a conductor_group as Ironic does (letters,
// digits, "_", "-" and ".", at most 255) and returns it lower case: Ironic
// treats groups case-insensitively and the hash ring compares them as
// stored.
func ValidateConductorGroup(field, g string) (string, error) {
	if len(g) > 255 || !conductorGroupRE.MatchString(g) {
		return "", errs.BadRequest(field, "Invalid conductor group %q: use at most 255 letters, digits, '_', '-' and '.'", g)
	}
	return strings.ToLower(g), nil
}

var customTraitRE = regexp.MustCompile(`^CUSTOM_[A-Z0-9_]+$`)

// standardTraitPrefixes are the os-traits namespaces. Ironic validates a
// standard trait against os-traits' full list; Anvil does not ship that
// list and accepts any upper-case name inside one of its namespaces.
var standardTraitPrefixes = []string{
	"COMPUTE_", "HW_", "MISC_", "STORAGE_", "OWNER_",
}

var standardTraitRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*[A-Z0-9]$`)

// ValidateTrait checks one trait name: CUSTOM_* or a standard trait.
func ValidateTrait(t string) error {
	if len(t) > maxTraitLen {
		return errs.BadRequest("traits", "trait %q is longer than %d characters", t[:32]+"…", maxTraitLen)
	}
	if customTraitRE.MatchString(t) {
		return nil
	}
	if standardTraitRE.MatchString(t) {
		for _, p := range standardTraitPrefixes {
			if strings.HasPrefix(t, p) {
				return nil
			}
		}
	}
	return errs.BadRequest("traits", "trait %q is neither a standard trait nor a custom one; custom traits look like CUSTOM_[A-Z0-9_]+", t)
}

// ValidateTraits checks a whole trait list, its size and duplicates.
func ValidateTraits(ts []string) error {
	if len(ts) > maxTraits {
		return errs.BadRequest("traits", "a node may have at most %d traits; %d were given", maxTraits, len(ts))
	}
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		if err := ValidateTrait(t); err != nil {
			return err
		}
		if seen[t] {
			return errs.BadRequest("traits", "trait %q is given twice", t)
		}
		seen[t] = true
	}
	return nil
}

// networkDataKeys are the top-level keys of the network_data document
// (OpenStack's network_data.json), each a list.
var networkDataKeys = []string{"links", "networks", "services"}

// ValidateNetworkData checks a node's static network configuration: an
// object of links, networks and services lists, as Ironic's schema has
// it. The entries themselves are the config drive's business and are
// kept as given.
func ValidateNetworkData(m map[string]any) error {
	for k, v := range m {
		if !slices.Contains(networkDataKeys, k) {
			return errs.BadRequest("network_data", "network_data may only hold %s; %q is not one of them", strings.Join(networkDataKeys, ", "), k)
		}
		list, ok := v.([]any)
		if !ok {
			return errs.BadRequest("network_data", "network_data.%s must be a list", k)
		}
		for i, e := range list {
			if _, ok := e.(map[string]any); !ok {
				return errs.BadRequest("network_data", "network_data.%s[%d] must be an object", k, i)
			}
		}
	}
	return nil
}
