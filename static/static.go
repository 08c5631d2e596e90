// Package static embeds the portal's CSS, htmx (2.0.11, 0BSD, from the
// htmx.org npm package; see htmx.LICENSE) and xterm.js for the serial
// console (@xterm/xterm 6.0.0 and @xterm/addon-fit 0.11.0, MIT, from npm,
// their lib/*.js without the source map line; see xterm*.LICENSE) so the
// binary serves them with no network and no CDN. Each file is served under a path carrying a hash of
// its content, so browsers may cache it for a year and still never see a
// stale copy after an upgrade.
package static

import (
	"crypto/sha256"
	"encoding/hex"
	"mime"
	"path"

	_ "embed" // the files below
)

// The files are strings, not an embed.FS: a string embeds in the binary's
// read-only data and is served from there, where embed.FS.ReadFile copies
// each file onto the heap (half a megabyte of it xterm.js) for the life of
// the process.
var (
	//go:embed anvil.css
	anvilCSS string
	//go:embed anvil.js
	anvilJS string
	//go:embed htmx.min.js
	htmxJS string
	//go:embed xterm.css
	xtermCSS string
	//go:embed xterm.min.js
	xtermJS string
	//go:embed xterm-addon-fit.min.js
	xtermFitJS string
)

// Asset is one embedded file.
type Asset struct {
	Body        string
	ContentType string
	Hash        string
}

var assets = map[string]Asset{}

func init() {
	for name, body := range map[string]string{
		"anvil.css": anvilCSS, "anvil.js": anvilJS, "htmx.min.js": htmxJS,
		"xterm.css": xtermCSS, "xterm.min.js": xtermJS, "xterm-addon-fit.min.js": xtermFitJS,
	} {
		sum := sha256.Sum256([]byte(body))
		assets[name] = Asset{Body: body, ContentType: mime.TypeByExtension(path.Ext(name)), Hash: hex.EncodeToString(sum[:])[:12]}
	}
}

// URL is the cache-safe path of an embedded file.
func URL(name string) string { return "/static/" + assets[name].Hash + "/" + name }

// Lookup returns the file for a hashed path's parts; a stale hash is not
// found, so no cache ever keeps an old file under a new name.
func Lookup(hash, name string) (Asset, bool) {
	a, ok := assets[name]
	return a, ok && a.Hash == hash
}
