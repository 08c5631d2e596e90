package api

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/anvilproject/anvil/server/errs"
	"github.com/anvilproject/anvil/server/fwimages"
)

// FirmwareImagesPath is the upload route, whose body is streamed to disk
// rather than read up front (the app's body limits exempt it).
const FirmwareImagesPath = "/v1/anvil/firmware-images"

// registerFirmwareImages mounts Anvil's firmware image store: an
// addition of Anvil's, outside Ironic's API, hence under /v1/anvil.
func (a *API) registerFirmwareImages(root, v1 fiber.Router) {
	v1.Get("/anvil/firmware-images", query(), a.listFirmwareImages)
	v1.Post("/anvil/firmware-images", query("name"), a.uploadFirmwareImage)
	v1.Delete("/anvil/firmware-images/:sha256", query(), a.deleteFirmwareImage)
	root.Get(fwimages.RoutePrefix+":sha256/:name", a.downloadFirmwareImage)
}

func (a *API) listFirmwareImages(c *fiber.Ctx) error {
	list, err := a.FirmwareImages.List(c.UserContext())
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"firmware_images": list})
}

// uploadFirmwareImage serves POST /v1/anvil/firmware-images: either the
// raw image as the body with ?name=, or multipart/form-data with a file
// part "file" (its filename the name unless a "name" field comes first).
func (a *API) uploadFirmwareImage(c *fiber.Ctx) error {
	body := c.Context().RequestBodyStream()
	if body == nil {
		body = bytes.NewReader(c.Body())
	}
	img, err := a.FirmwareImages.Add(c.UserContext(), func() (string, io.Reader, error) {
		// An image may take longer to arrive than the server's read
		// timeout allows a request; the store bounds its size.
		_ = c.Context().Conn().SetReadDeadline(time.Now().Add(time.Hour))
		mt, params, _ := mime.ParseMediaType(c.Get(fiber.HeaderContentType))
		if mt != fiber.MIMEMultipartForm {
			if c.Query("name") == "" {
				return "", nil, errs.BadRequest("name", "name is required: give ?name= with a raw body, or upload multipart/form-data with a file part")
			}
			return c.Query("name"), body, nil
		}
		if c.Query("name") != "" {
			return "", nil, errs.BadRequest("name", "give the name as a form field, not ?name=, with a multipart upload")
		}
		return filePart(multipart.NewReader(body, params["boundary"]))
	})
	if err != nil {
		return err
	}
	c.Location(baseURL(c) + FirmwareImagesPath)
	return c.Status(201).JSON(img)
}

// filePart reads the form up to its "file" part and returns the image's
// name and the part itself, which the store then streams to disk.
func filePart(mr *multipart.Reader) (string, io.Reader, error) {
	name := ""
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return "", nil, errs.BadRequest("file", "the form has no file part")
		}
		if err != nil {
			return "", nil, errs.BadRequest("body", "the multipart body could not be read: %v", err)
		}
		switch p.FormName() {
		case "name":
			v, err := io.ReadAll(io.LimitReader(p, 256))
			if err != nil {
				return "", nil, errs.BadRequest("name", "the name field could not be read: %v", err)
			}
			name = string(v)
		case "file":
			if name == "" {
				name = path.Base(p.FileName())
			}
			return name, p, nil
		default:
			return "", nil, errs.BadRequest(p.FormName(), "unknown form field %q: give name and file", p.FormName())
		}
	}
}

func (a *API) deleteFirmwareImage(c *fiber.Ctx) error {
	if err := a.FirmwareImages.Delete(c.UserContext(), c.Params("sha256")); err != nil {
		return err
	}
	return c.SendStatus(204)
}

// downloadFirmwareImage serves GET /firmware/{sha256}/{name} to BMCs,
// without credentials: the content hash is the secret, and the content
// behind an address never changes, so caches may keep it.
func (a *API) downloadFirmwareImage(c *fiber.Ctx) error {
	f, fi, err := a.FirmwareImages.Open(c.Params("sha256"), c.Params("name"))
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEOctetStream)
	c.Set(fiber.HeaderETag, strconv.Quote(c.Params("sha256")))
	c.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
	c.Set(fiber.HeaderLastModified, fi.ModTime().UTC().Format(http.TimeFormat))
	c.Response().SetBodyStream(f, int(fi.Size()))
	return nil
}
