package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/anvilproject/anvil/ent/node"
	"github.com/anvilproject/anvil/server/bmc/bmctest"
	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestNodeScreenshot: the node page shows the console screenshot a
// management.screenshot step kept, served as the image it is, to a
// viewer who may see the node's console; another project's member, who
// may not, is refused it (403, or 404 where the node is hidden too).
func TestNodeScreenshot(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, ids := fleet(t, setting)
		ctx := context.Background()
		id := ids["f-00"]
		pat := signInAs(t, srv, "pat")
		if _, page, _ := pat.do("GET", "/nodes/"+id, nil); strings.Contains(page, `data-testid="screenshot"`) {
			t.Fatal("a node without a screenshot shows one")
		}
		n, err := srv.DB.Node.Query().Where(node.UUID(id)).Only(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// As management.screenshot keeps it (its API test takes it from a
		// BMC fake).
		if err := srv.DB.NodeScreenshot.Create().SetNodeID(n.ID).SetImage(bmctest.ScreenPNG).SetFileType("png").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		_, page, _ := pat.do("GET", "/nodes/"+id, nil)
		if !strings.Contains(page, `data-testid="screenshot"`) || !strings.Contains(page, `<img src="/nodes/`+id+`/screenshot"`) {
			t.Fatalf("the node page lacks the screenshot:\n%s", page)
		}
		st, body, h := pat.do("GET", "/nodes/"+id+"/screenshot", nil)
		if st != 200 || body != string(bmctest.ScreenPNG) || h.Get("Content-Type") != "image/png" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("screenshot: %d %s %q", st, h.Get("Content-Type"), body)
		}
		gil := signInAs(t, srv, "gil")
		if st, body, _ := gil.do("GET", "/nodes/"+id+"/screenshot", nil); (st != 403 && st != 404) || strings.Contains(body, "PNG") {
			t.Errorf("another project's member reads the screenshot: %d", st)
		}
	})
}
