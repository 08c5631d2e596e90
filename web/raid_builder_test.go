package web_test

import (
	"encoding/json"
	"html"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

var raidField = regexp.MustCompile(`(?s)<textarea id="s0-a-raid_config"[^>]*>(.*?)</textarea>`)

// The RAID builder of raid.apply_configuration adds logical disks to the
// step's raid_config one at a time (and removes them), checking each as
// Ironic's RAID schema does; a refused disk is named by its place
// (logical_disks[2].raid_level) and changes nothing; what is saved is
// exactly what the builder wrote, and a bad raid_config is not saved.
func TestRunbookEditorRAIDBuilder(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, db *store.DB) {
		env := newEditorEnvOn(t, setting)
		mia := env.signIn("mia")
		mia.do("GET", "/runbooks/new", nil)
		cfg := "" // the raid_config field, as the last answer showed it
		post := func(op string, status int, builder ...string) string {
			t.Helper()
			f := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_RAID_BUILT"}, "op": {op}},
				[]string{"raid.apply_configuration", "raid_config=" + cfg, "delete_existing=false"})
			for _, kv := range builder {
				k, v, _ := strings.Cut(kv, "=")
				f.Set("s0.b."+k, v)
			}
			st, page, _ := mia.do("POST", "/runbooks/new", f, "HX-Request", "true")
			if st != status {
				t.Fatalf("%s: status %d, want %d:\n%s", op, st, status, between(page, `data-row="0"`, "</tr>"))
			}
			m := raidField.FindStringSubmatch(page)
			if m == nil {
				t.Fatalf("%s: no raid_config field:\n%s", op, page)
			}
			cfg = html.UnescapeString(m[1])
			return page
		}
		disks := func() []any {
			var c map[string]any
			if cfg != "" {
				if err := json.Unmarshal([]byte(cfg), &c); err != nil {
					t.Fatalf("raid_config %q: %v", cfg, err)
				}
			}
			l, _ := c["logical_disks"].([]any)
			return l
		}

		post("append:0", 200, "size_gb=100", "raid_level=1", "is_root_volume=true", "volume_name=os")
		page := post("append:0", 200, "size_gb=MAX", "raid_level=5", "controller=RAID.Integrated.1-1",
			"physical_disks=Disk.0, Disk.1,Disk.2", "disk_type=ssd", "interface_type=sas", "number_of_physical_disks=3", "share_physical_disks=true")
		want := []any{
			map[string]any{"size_gb": 100.0, "raid_level": "1", "is_root_volume": true, "volume_name": "os"},
			map[string]any{"size_gb": "MAX", "raid_level": "5", "controller": "RAID.Integrated.1-1", "physical_disks": []any{"Disk.0", "Disk.1", "Disk.2"},
				"disk_type": "ssd", "interface_type": "sas", "number_of_physical_disks": 3.0, "share_physical_disks": true},
		}
		if !reflect.DeepEqual(disks(), want) {
			t.Fatalf("built %s", cfg)
		}
		if !strings.Contains(page, "RAID 1, 100 GiB, os, root volume") || !strings.Contains(page, "RAID 5, MAX") {
			t.Errorf("the builder does not list the disks:\n%s", between(page, `data-testid="builder-0"`, "</fieldset>"))
		}

		// Refused: each names the field by the disk's place, adds nothing
		// and keeps what was typed.
		for _, c := range []struct{ field, msg string }{
			{"raid_level=", "logical_disks[2].raid_level must be one of JBOD, 0, 1"},
			{"size_gb=lots", "logical_disks[2].size_gb must be a whole number of GiB or MAX"},
			{"physical_disks=Disk.4", "logical_disks[2].controller is required when physical_disks is given"},
		} {
			builder := []string{"size_gb=20", "raid_level=0", "volume_name=kept"}
			builder = append(builder, c.field)
			page := post("append:0", 200, builder...)
			if !strings.Contains(page, c.msg) || !strings.Contains(page, `value="kept"`) || !reflect.DeepEqual(disks(), want) {
				t.Errorf("%s: not refused by name (%q), or the form lost something:\n%s", c.field, c.msg, between(page, `data-testid="builder-0"`, "</fieldset>"))
			}
		}

		// A third disk, removed again.
		post("append:0", 200, "size_gb=10", "raid_level=JBOD")
		if len(disks()) != 3 {
			t.Fatalf("third disk not added: %s", cfg)
		}
		if page := post("rmdisk:0:2", 200); !reflect.DeepEqual(disks(), want) || !strings.Contains(page, "Removed logical disk 3 (RAID JBOD, 10 GiB)") {
			t.Errorf("remove: %s", cfg)
		}

		// A raid_config edited by hand that the schema refuses: the save
		// is refused naming the field and stores nothing.
		good := cfg
		cfg = strings.Replace(cfg, `"raid_level": "5"`, `"raid_level": "7"`, 1)
		page = post("save", 400)
		if !strings.Contains(page, "argument raid_config logical_disks[1].raid_level must be one of") || !strings.Contains(page, `&#34;raid_level&#34;: &#34;7&#34;`) {
			t.Errorf("a bad raid_config is not refused by name, or the field lost it:\n%s", between(page, `data-row="0"`, "</tr>"))
		}
		if st, _ := env.runbook("CUSTOM_RAID_BUILT"); st != 404 {
			t.Errorf("a refused runbook was stored: %d", st)
		}

		cfg = good
		f := rows(url.Values{"csrf": {mia.csrf}, "name": {"CUSTOM_RAID_BUILT"}, "op": {"save"}},
			[]string{"raid.apply_configuration", "raid_config=" + cfg, "delete_existing=false"})
		if st, _, _ := mia.do("POST", "/runbooks/new", f); st != 303 {
			t.Fatalf("save: %d", st)
		}
		_, rb := env.runbook("CUSTOM_RAID_BUILT")
		steps, _ := rb["steps"].([]any)
		wantArgs := map[string]any{"raid_config": map[string]any{"logical_disks": want}, "delete_existing": false}
		if len(steps) != 1 || !reflect.DeepEqual(steps[0].(map[string]any)["args"], wantArgs) {
			t.Errorf("stored steps %v, want one with args %v", steps, wantArgs)
		}
		// The stored runbook opens in the builder with its disks.
		if st, page, _ := mia.do("GET", "/runbooks/"+rb["uuid"].(string)+"/edit", nil); st != 200 || !strings.Contains(page, "RAID 5, MAX") {
			t.Errorf("editing the saved runbook: %d, disks not listed", st)
		}
	})
}
