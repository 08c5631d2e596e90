package web_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestFailuresSayWhatToDo: a busy node shows how long it has been busy and
// every action section (sent again out of band with each status update)
// disabled with the reason; a failed one shows a plain summary of the BMC
// failure and what to do, the raw text behind a disclosure.
func TestFailuresSayWhatToDo(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, ids := fleet(t, setting)
		ctx := context.Background()
		id := ids["f-00"]
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean wait").SetTargetProvisionState("manageable").
			SetProvisionUpdatedAt(time.Now().Add(-75 * time.Second)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		pat := signInAs(t, srv, "pat")
		_, page, _ := pat.do("GET", "/nodes/"+id, nil)
		if !regexp.MustCompile(`data-testid="elapsed">1 min 1[5-9] s<`).MatchString(page) {
			t.Errorf("busy node: no elapsed time\n%s", page)
		}
		for _, want := range []string{
			"Power actions wait while the node is clean wait.",
			`<button type="submit" disabled aria-describedby="power-why">Power on</button>`,
			"Runbooks wait while the node is clean wait.",
			">Abort the run</button>",
		} {
			if !strings.Contains(page, want) {
				t.Errorf("busy node page lacks %s", want)
			}
		}
		// Each status update carries the action sections too, and the
		// Hardware section a run may change.
		_, frag, _ := pat.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
		if strings.Count(frag, `hx-swap-oob="true"`) != 4 || !strings.Contains(frag, `disabled aria-describedby="power-why">Reboot</button>`) {
			t.Errorf("status update without the action sections:\n%s", frag)
		}

		// The run failed: a BMC that did not answer.
		raw := "Step power.power_on failed: setting power on: the BMC did not answer (timeout)"
		if err := srv.DB.Node.Update().Where(node.UUID(id)).SetProvisionState("clean failed").ClearTargetProvisionState().SetLastError(raw).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		_, frag, _ = pat.do("GET", "/nodes/"+id+"/status", nil, "HX-Request", "true")
		for _, want := range []string{
			`<strong data-testid="error-summary">The BMC at this node did not answer.</strong>`,
			"Check that the BMC is powered and on the network, then try again",
			"Then use “Return to manageable” under Recovery.",
			"<details class=\"detail\"><summary>Details</summary><pre>" + raw + "</pre></details>",
			">Return to manageable</button>",
			`<button type="submit">Power on</button>`,
		} {
			if !strings.Contains(frag, want) {
				t.Errorf("failed node lacks %s\n%s", want, frag)
			}
		}
		if strings.Contains(frag, `data-testid="elapsed"`) {
			t.Errorf("a failed node is not busy")
		}
	})
}
