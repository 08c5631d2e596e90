//go:build !linux

package imagecache

import (
	"io/fs"
	"time"
)

// changed is the modification time where the change time is not read:
// a download sets it and a reuse refreshes it just before linking, so it
// is no older than the file's newest token.
func changed(fi fs.FileInfo) time.Time { return fi.ModTime() }
