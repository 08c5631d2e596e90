package policies

import (
	"embed"
	"slices"
)

// presetFiles are the override presets Anvil ships: Ironic-format
// policy files an operator drops into policy.d or applies from the
// policy console, embedded so every binary offers the same ones.
//
//go:embed presets/*.yaml
var presetFiles embed.FS

// Preset is one shipped override file and the site it fits.
type Preset struct {
	// Name is the file's name without .yaml; File is the name it takes
	// in policy.d and in a stored revision.
	Name, File string
	// Title and Fits say what it allows and which site it is for, as
	// the policy console and docs/managers/policy-presets.md say it.
	Title, Fits string
	Data        []byte
}

// presets describes each file under presets/, in the order the policy
// console lists them; TestPresetsShipped keeps the two in step.
var presets = []struct{ name, title, fits string }{
	{"lessee-operates", "Lessees operate their leased nodes",
		"A site whose owners lease whole machines to tenant projects, and whose tenants' members (not only their admins) deploy, rebuild, release and use the console of the machines their project leases."},
}

// Presets are the shipped presets with their files' bytes.
func Presets() []Preset {
	out := make([]Preset, 0, len(presets))
	for _, p := range presets {
		data, err := presetFiles.ReadFile("presets/" + p.name + ".yaml")
		if err != nil {
			// The table names a file the embed does not hold: a build
			// that cannot have passed TestPresetsShipped.
			panic(err)
		}
		out = append(out, Preset{Name: p.name, File: p.name + ".yaml", Title: p.title, Fits: p.fits, Data: data})
	}
	return out
}

// PresetNamed is the shipped preset called name.
func PresetNamed(name string) (Preset, bool) {
	ps := Presets()
	i := slices.IndexFunc(ps, func(p Preset) bool { return p.Name == name })
	if i < 0 {
		return Preset{}, false
	}
	return ps[i], true
}
