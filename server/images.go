package server

import (
	"errors"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/imagecache"
)

// serveImage answers GET /images/{token}: the image a deploy with
// image_download_source=local has its agent fetch. It takes no
// credentials (the agent has none to give): the random token is the
// secret, and it lives only while that deploy writes the image. Each
// token is one deploy's, so nothing may cache the answer.
func (a *App) serveImage(c *fiber.Ctx) error {
	f, fi, err := a.Cond.Images().Open(c.Params("token"))
	if errors.Is(err, imagecache.ErrNotFound) {
		return errs.NotFound("There is no image at this address; it serves only while its deploy writes the image.")
	}
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEOctetStream)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Response().SetBodyStream(f, int(fi.Size()))
	return nil
}

// imageWriteTime is how long the answer to a live image token may take
// to write. The server's 60 s write timeout covers a whole response, and
// a large image on a slow provisioning network takes much longer; only
// requests for a live token get the longer time, so nobody without one
// holds a connection open for it.
const imageWriteTime = 6 * time.Hour

// imageWriteTimeout is the server's HeaderReceived hook.
func (a *App) imageWriteTimeout(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if tok, ok := strings.CutPrefix(string(h.RequestURI()), imagecache.RoutePrefix); ok && a.Cond.Images().Live(tok) {
		return fasthttp.RequestConfig{WriteTimeout: imageWriteTime}
	}
	return fasthttp.RequestConfig{}
}
