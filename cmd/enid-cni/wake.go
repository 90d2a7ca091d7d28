package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// dirWake wakes a status wait when something is renamed or written into a
// directory (the agent publishes every status by rename), so an ADD sees
// its answer the moment it lands instead of at the next poll. It is an
// optimisation only: without it (the directory does not exist yet, or
// inotify is unavailable) the wait polls as before.
type dirWake struct{ fd int }

// watchDir starts watching dir; it returns nil when it cannot.
func watchDir(dir string) *dirWake {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE|unix.IN_DELETE); err != nil {
		unix.Close(fd) //nolint:errcheck // nothing to do about a failed close of a fresh descriptor
		return nil
	}
	return &dirWake{fd: fd}
}

// wait blocks until an event arrives or d passes, then drains the events
// (their content does not matter: the caller re-reads its file). A nil
// dirWake just sleeps.
func (w *dirWake) wait(d time.Duration) {
	if w == nil {
		time.Sleep(d)
		return
	}
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
	ms := int(d / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	if _, err := unix.Poll(fds, ms); err != nil && err != unix.EINTR {
		time.Sleep(d)
		return
	}
	var buf [4096]byte
	for {
		if n, err := unix.Read(w.fd, buf[:]); n <= 0 || err != nil {
			return
		}
	}
}

// close releases the watch.
func (w *dirWake) close() {
	if w != nil {
		unix.Close(w.fd) //nolint:errcheck // read-only descriptor: nothing to flush
	}
}
