package conductor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/anvilproject/anvil/ent"
	"github.com/anvilproject/anvil/policies"
	"github.com/anvilproject/anvil/server/egress"
	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/urlsafe"
)

// imageCheckTimeout bounds the check of a deploy's image URL: the
// request waits for it, and an image server that slow would fail the
// agent's download anyway.
const imageCheckTimeout = 15 * time.Second

// errRefused is an image_source whose address --image-source-networks
// refused: no request was sent, so saying so tells nobody how any host
// answers.
var errRefused = errors.New("is not fetched")

// checkImageSource refuses a direct deploy whose image_source does not
// answer 200 to a HEAD, before anything changes (Ironic's
// HttpImageService.validate_href, run by the deploy interface's
// validation): a missing image is a 400 naming the server's answer at
// once rather than a deploy that waits out the agent's retries.
func (c *Conductor) checkImageSource(ctx context.Context, n *ent.Node) error {
	if deployMode(n) != modeDirect {
		return nil
	}
	src, _ := n.InstanceInfo["image_source"].(string)
	if err := headImage(ctx, c.fetch, src); err != nil {
		// Without an allow-list an address that was asked may be any
		// host on the conductor's networks: a project caller is told
		// the image could not be fetched, not whether or how that host
		// answered (#41); a system caller and the log get the answer.
		// With one, every address asked is an image server the operator
		// named, whose answers anyone may read.
		if p := policies.PrincipalFrom(ctx); len(c.cfg.ImageSourceNetworks) == 0 && p != nil && !p.System && !errors.Is(err, errRefused) {
			c.log.Info("the HEAD of a deploy's image_source failed", "node", n.UUID, "err", err)
			err = errors.New("could not be fetched (without --image-source-networks, only system scope is told how its server answered)")
		}
		return errs.BadRequest("instance_info.image_source", "Cannot deploy node %s: instance_info.image_source %s %v", n.UUID, urlsafe.Strip(src), err)
	}
	return nil
}

// headImage asks src's server for the image with a HEAD, following
// redirects as Ironic does, and says what was wrong unless it answered
// 200; the body is never read. client is the one Anvil fetches for
// tenants with, so --image-source-networks guards this as it guards the
// image cache: an address it refuses is never asked, and the error says
// only which kind of address it was. The URL's own text never appears
// in the error, since it may carry credentials.
func headImage(ctx context.Context, client *http.Client, src string) error {
	ctx, cancel := context.WithTimeout(ctx, imageCheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, src, nil)
	if err != nil {
		return errors.New("is not a URL Anvil can request")
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var refused *egress.RefusedError
		if errors.As(err, &refused) {
			return fmt.Errorf("%w: %s", errRefused, refused.Summary())
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("did not answer a HEAD request within %s", imageCheckTimeout)
		}
		return fmt.Errorf("could not be reached: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s to a HEAD request, not 200 OK", resp.Status)
	}
	return nil
}
