package web

import (
	"context"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/server/conductor"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/nodes"
	"github.com/anvilproject/anvil/server/wipes"
	"github.com/anvilproject/anvil/views"
)

// nodeWipes is how many wipe records the node page lists.
const nodeWipes = 10

// wipeRows are node's last wipe records the viewer may read, newest
// first, as the node and allocation pages list them.
func (p *Portal) wipeRows(ctx context.Context, node string, limit int) ([]views.WipeRow, error) {
	rs, err := p.Wipes.List(ctx, wipes.ListOptions{Node: node, Limit: limit})
	if errs.Status(err) == 403 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]views.WipeRow, len(rs))
	for i, r := range rs {
		out[i] = views.WipeRow{UUID: r.UUID, Policy: r.Policy, Result: r.Result, Finished: r.FinishedAt,
			Summary: conductor.WipeSummary(r.Policy, r.Result, r.Message, r.Disks, r.FinishedAt.Sub(r.StartedAt))}
	}
	return out, nil
}

// wipePage is a wipe record's printable page: readable by those the
// record names (owner, lessee, the allocation's project at the wipe) and
// system readers, whether or not they still see the node.
func (p *Portal) wipePage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	r, err := p.Wipes.Get(ctx, c.Params("id"))
	if err != nil {
		return p.fail(c, err)
	}
	pg, err := p.page(c, "Wipe record "+r.UUID)
	if err != nil {
		return err
	}
	_, nerr := p.Nodes.Authorized(ctx, r.NodeUUID, nodes.RuleGet)
	return render(c, 200, views.WipeRecordPage(pg, wipeView(r, nerr == nil)))
}

func wipeView(r *ent.WipeRecord, nodeVisible bool) views.WipeRecordView {
	v := views.WipeRecordView{UUID: r.UUID, NodeUUID: r.NodeUUID, NodeName: deref(r.NodeName), Owner: deref(r.Owner), Lessee: deref(r.Lessee),
		Allocation: deref(r.Allocation), AllocationOwner: deref(r.AllocationOwner), Policy: r.Policy, Result: r.Result, Message: r.Message,
		AgentLog: r.AgentLog, Conductor: r.Conductor, Started: r.StartedAt, Finished: r.FinishedAt,
		Duration: r.FinishedAt.Sub(r.StartedAt).Round(time.Second).String(), NodeVisible: nodeVisible}
	for _, d := range r.Disks {
		disk := views.WipeDisk{Name: fmt.Sprint(d["name"]), Serial: str(d["serial"]), Model: str(d["model"]), Method: str(d["method"])}
		if size, ok := d["size"].(float64); ok {
			disk.Size = fmt.Sprintf("%.1f GiB (%.0f bytes)", size/(1<<30), size)
		}
		v.Disks = append(v.Disks, disk)
	}
	return v
}
