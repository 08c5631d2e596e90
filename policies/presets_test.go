package policies

import (
	"io/fs"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestPresetsShipped: every file under presets/ is described and every
// description has its file, and each preset is a valid override.
func TestPresetsShipped(t *testing.T) {
	files, err := fs.Glob(presetFiles, "presets/*")
	if err != nil {
		t.Fatal(err)
	}
	var described []string
	for _, p := range Presets() {
		described = append(described, "presets/"+p.File)
		var rules map[string]string
		if err := yaml.Unmarshal(p.Data, &rules); err != nil || len(rules) == 0 {
			t.Errorf("%s: %v (%d rules)", p.File, err, len(rules))
		}
		if _, err := New(Defaults(), rules); err != nil {
			t.Errorf("%s is not a valid override: %v", p.File, err)
		}
	}
	if slices.Sort(files); !slices.Equal(files, slices.Sorted(slices.Values(described))) {
		t.Errorf("preset files %v, described %v", files, described)
	}
	if _, ok := PresetNamed("no-such-preset"); ok {
		t.Error("PresetNamed found a preset that is not shipped")
	}
}

// TestLesseeOperatesPreset: with the preset, the lessee's member (and
// admin and manager) may deploy, validate, set instance_info and use the
// console of the matrix's node, its reader still may not, and no persona
// of a project neither owning nor leasing the node gains anything;
// without it, Ironic's defaults refuse the lessee's member.
func TestLesseeOperatesPreset(t *testing.T) {
	p, ok := PresetNamed("lessee-operates")
	if !ok {
		t.Fatal("lessee-operates is not shipped")
	}
	var rules map[string]string
	if err := yaml.Unmarshal(p.Data, &rules); err != nil {
		t.Fatal(err)
	}
	with, err := New(Defaults(), rules)
	if err != nil {
		t.Fatal(err)
	}
	without, err := New(Defaults(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{"baremetal:node:set_provision_state", "baremetal:node:update_instance_info",
		"baremetal:node:validate", "baremetal:node:get_console", "baremetal:node:set_console_state"} {
		if _, ok := rules[rule]; !ok {
			t.Errorf("the preset does not change %s", rule)
		}
		for _, ps := range Personas() {
			got, err := with.Decide(ps.Principal, rule, MatrixTarget)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := without.Decide(ps.Principal, rule, MatrixTarget)
			switch {
			case strings.HasPrefix(ps.Name, "lessee-") && ps.Name != "lessee-reader" && ps.Name != "lessee-service":
				if !got {
					t.Errorf("%s %s: refused with the preset", ps.Name, rule)
				}
				if ps.Name == "lessee-member" && before {
					t.Errorf("%s %s: allowed by the defaults already", ps.Name, rule)
				}
			case got != before:
				t.Errorf("%s %s: %v with the preset, %v without: only the lessee's members may change", ps.Name, rule, got, before)
			}
		}
	}
	// Power and recovery are the defaults' already: the preset need not
	// and does not touch them.
	for _, rule := range []string{"baremetal:node:set_power_state", "anvil:node:recover"} {
		if _, ok := rules[rule]; ok {
			t.Errorf("the preset repeats %s", rule)
		}
		for _, ps := range Personas() {
			if ps.Name == "lessee-member" {
				if ok, _ := without.Decide(ps.Principal, rule, MatrixTarget); !ok {
					t.Errorf("the defaults refuse %s %s, which the preset relies on", ps.Name, rule)
				}
			}
		}
	}
}
