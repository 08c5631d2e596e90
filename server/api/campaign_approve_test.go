package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/server"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestCampaignCreatorCannotApprove: approval is a second pair of eyes. A
// lessee manager who created a campaign may approve campaigns but not
// this one, and is told who may; another manager of the project can.
// A single-operator site opens baremetal:campaign:approve:own in policy.d
// and then its creator approves it.
func TestCampaignCreatorCannotApprove(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		dir := t.TempDir()
		_, clients := startLocal(t, setting, server.Options{PolicyDir: dir, PolicyOverrideEnabled: true})
		admin, lesManager := clients["system-admin"], clients["lessee-manager"]
		mustStatus(t, admin.Do(t, "POST", "/v1/runbooks", map[string]any{"name": "CUSTOM_CAMP_EYES", "public": true,
			"steps": []any{map[string]any{"interface": "deploy", "step": "wait", "order": 1, "args": map[string]any{"seconds": 0}}}}), 201)
		names := campaignNodes(t, admin, "eyes", "CUSTOM_CAMP_EYES", 2)
		create := func(c string, name string) string {
			r := clients[c].Do(t, "POST", "/v1/campaigns", map[string]any{"name": name, "runbook": "CUSTOM_CAMP_EYES", "nodes": names, "requires_approval": true})
			mustStatus(t, r, 201)
			return r.JSON(t)["uuid"].(string)
		}
		id := create("lessee-manager", "eyes")
		r := lesManager.Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil)
		mustStatus(t, r, 403)
		if f := r.Fault(t); !strings.Contains(f, "someone else approves it") || !strings.Contains(f, "baremetal:campaign:approve:own") {
			t.Errorf("creator's refusal says %q", f)
		}
		if m := lesManager.Do(t, "GET", "/v1/campaigns/"+id, nil).JSON(t); m["state"] != "pending_approval" || m["approved_by"] != nil {
			t.Fatalf("after the creator's refused approval: %v", m)
		}
		// The system admin created the second one: even it needs another.
		sys := create("system-admin", "eyes-sys")
		mustStatus(t, admin.Do(t, "POST", "/v1/campaigns/"+sys+"/approve", nil), 403)
		mustStatus(t, clients["system-member"].Do(t, "POST", "/v1/campaigns/"+sys+"/approve", nil), 202)
		mustStatus(t, clients["system-member"].Do(t, "POST", "/v1/campaigns/"+id+"/approve", nil), 202)
		m := waitCampaign(t, lesManager, id, stateIs("completed"))
		if m["approved_by"] != "system-member" {
			t.Errorf("approved by %v", m["approved_by"])
		}

		// A single-operator site lets creators approve their own.
		if err := os.WriteFile(filepath.Join(dir, "10-one-operator.yaml"), []byte(`"baremetal:campaign:approve:own": "@"`), 0o644); err != nil {
			t.Fatal(err)
		}
		waitCampaign(t, admin, sys, stateIs("completed"))
		solo := create("lessee-manager", "eyes-solo")
		eventually(t, "the creator's approval allowed", func() bool {
			return lesManager.Do(t, "POST", "/v1/campaigns/"+solo+"/approve", nil).Status == 202
		})
	})
}
