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
	"embed"
	"encoding/hex"
	"mime"
	"path"
)

//go:embed anvil.css anvil.js htmx.min.js xterm.css xterm.min.js xterm-addon-fit.min.js
var files embed.FS

// Asset is one embedded file.
type Asset struct {
	Body        []byte
	ContentType string
	Hash        string
}

var assets = map[string]Asset{}

func init() {
	for _, name := range []string{"anvil.css", "anvil.js", "htmx.min.js", "xterm.css", "xterm.min.js", "xterm-addon-fit.min.js"} {
		b, err := files.ReadFile(name)
		if err != nil {
			panic(err) // the embed directive guarantees the file
		}
		sum := sha256.Sum256(b)
		assets[name] = Asset{Body: b, ContentType: mime.TypeByExtension(path.Ext(name)), Hash: hex.EncodeToString(sum[:])[:12]}
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
