// Package static embeds the portal's CSS and htmx (2.0.11, 0BSD, from the
// htmx.org npm package; see htmx.LICENSE) so the binary serves them with no
// network and no CDN.
package static

import "embed"

// FS holds the files under /static/.
//
//go:embed anvil.css htmx.min.js
var FS embed.FS
