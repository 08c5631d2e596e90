package imagecache

import (
	"io/fs"
	"syscall"
	"time"
)

// changed is the inode's change time (ctime).
func changed(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return fi.ModTime()
}
