package fileread

import (
	"io/fs"
	"syscall"
)

// ID identifies a file's content as far as the kernel tells: its inode,
// size and change times. Every writer of the files enid caches by ID
// (entries, statuses, the kubelet's records) replaces them by rename, so a
// new content is a new inode; a rewrite in place changes the ctime.
type ID struct {
	ino, size    int64
	mtime, ctime int64 // ns
}

// NewID is the ID of a stat's fields (times in ns), for a caller that
// stats with another package (desired's fstatat relative to an open
// directory).
func NewID(ino uint64, size, mtime, ctime int64) ID {
	return ID{ino: int64(ino), size: size, mtime: mtime, ctime: ctime}
}

// LstatID returns the ID of the regular file at path, without following a
// symlink; ok is false for anything but a regular file, and when the stat
// fails.
func LstatID(path string) (id ID, ok bool) {
	var st syscall.Stat_t
	if err := retry(func() error { return syscall.Lstat(path, &st) }); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return ID{}, false
	}
	return NewID(st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()), true
}

// IDOf returns the ID of a regular file from its FileInfo (an os.Stat or
// an fstat); ok is false for anything else.
func IDOf(fi fs.FileInfo) (id ID, ok bool) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat || !fi.Mode().IsRegular() {
		return ID{}, false
	}
	return NewID(st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()), true
}
