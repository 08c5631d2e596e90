package api

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/bootiso"
	"github.com/anvilproject/anvil/server/errs"
)

// downloadBootISO serves GET /boot-iso/{name} to BMCs, without
// credentials: the random name is the secret, and the ISO lives for one
// boot of the agent. BMCs often read virtual media in pieces as the
// machine reads its CD, so a single byte range is answered with 206.
func (a *API) downloadBootISO(c *fiber.Ctx) error {
	f, fi, err := a.BootISOs.Open(c.Params("name"))
	if errors.Is(err, fs.ErrNotExist) {
		return errs.NotFound("There is no boot ISO at %s%s.", bootiso.RoutePrefix, c.Params("name"))
	}
	if err != nil {
		return err
	}
	size := fi.Size()
	c.Set(fiber.HeaderContentType, "application/octet-stream")
	c.Set(fiber.HeaderAcceptRanges, "bytes")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderLastModified, fi.ModTime().UTC().Format(http.TimeFormat))
	if rng := c.Get(fiber.HeaderRange); rng != "" {
		start, end, ok := byteRange(rng, size)
		if !ok {
			f.Close()
			c.Set(fiber.HeaderContentRange, "bytes */"+strconv.FormatInt(size, 10))
			return c.SendStatus(fiber.StatusRequestedRangeNotSatisfiable)
		}
		c.Status(fiber.StatusPartialContent)
		c.Set(fiber.HeaderContentRange, "bytes "+strconv.FormatInt(start, 10)+"-"+strconv.FormatInt(end, 10)+"/"+strconv.FormatInt(size, 10))
		c.Response().SetBodyStream(readCloser{io.NewSectionReader(f, start, end-start+1), f}, int(end-start+1))
		return nil
	}
	c.Response().SetBodyStream(f, int(size))
	return nil
}

// readCloser reads from a section of a file and closes the file.
type readCloser struct {
	io.Reader
	io.Closer
}

// byteRange parses a Range header of one range ("bytes=a-b", "bytes=a-",
// "bytes=-n") against size into the first and last byte offsets. Several
// ranges are not served: a BMC asks for one at a time.
func byteRange(h string, size int64) (start, end int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false
	}
	var err error
	switch {
	case a == "":
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, false
		}
		start, end = max(size-n, 0), size-1
	default:
		if start, err = strconv.ParseInt(a, 10, 64); err != nil || start < 0 {
			return 0, 0, false
		}
		end = size - 1
		if b != "" {
			if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < start {
				return 0, 0, false
			}
			end = min(end, size-1)
		}
	}
	if start >= size || size == 0 {
		return 0, 0, false
	}
	return start, end, true
}
