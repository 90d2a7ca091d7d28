package status

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// A heartbeat is only as good as its writer: an agent killed with SIGKILL
// leaves a fresh one behind, which would pass for a running agent for up to
// its maximum age. So the agent holds a lock beside the heartbeat for as
// long as it lives (LockAgent), and the kernel releases it the moment the
// process dies. Readers test the lock without taking it (an open file
// description lock, F_OFD_GETLK): a reader never holds it, so it can never
// make a starting agent believe another one runs. The lock file sits in the
// heartbeat's directory, so whoever can read the heartbeat can test it: the
// CNI plugin on the host as well as `enid status` in the agent's container,
// across pid namespaces. Where it cannot be opened, the process named by
// the heartbeat is looked up in /proc, but only from the agent's own pid
// namespace, and only as the process that started at the recorded time
// (a pid is reused; in another namespace it names another process).

// LockFileName is the lock file the agent holds beside its heartbeat.
const LockFileName = "agent.lock"

// Open file description locks (Linux 3.15): owned by the open file, not the
// process, so two agents in one process (tests) exclude each other too.
// The values are the kernel's asm-generic ones, used by every architecture
// Go supports on Linux; the syscall package does not name them.
const (
	fOFDGetlk = 36
	fOFDSetlk = 37
)

// Process says whether the process that wrote a heartbeat still runs, as
// far as a reader can tell.
type Process int

const (
	// ProcessUnknown: nothing tells (an older agent's heartbeat, a reader
	// that can open neither the lock nor the process in /proc).
	ProcessUnknown Process = iota
	// ProcessRunning: the writer holds its lock, or runs as recorded.
	ProcessRunning
	// ProcessGone: the lock is free, or no process of that pid and start
	// time runs (or only its zombie): the writer died or exited.
	ProcessGone
)

func (p Process) String() string {
	switch p {
	case ProcessRunning:
		return "running"
	case ProcessGone:
		return "not running"
	}
	return "unknown"
}

// ErrAgentLocked is wrapped by LockAgent when another live agent holds the
// lock.
var ErrAgentLocked = errors.New("another enid agent holds the heartbeat's lock")

// LockAgent takes the lock an agent holds while it runs, LockFileName in
// the directory of the heartbeat agentFile (created if needed), and returns
// the name to record in the heartbeat (Agent.Lock) and the function that
// releases it. The error wraps ErrAgentLocked when another live process
// holds it. The file is 0644: a reader needs to open it, read-only, to test
// it.
func LockAgent(agentFile string) (name string, release func(), err error) {
	dir := filepath.Dir(agentFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("create heartbeat dir: %w", err)
	}
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return "", nil, fmt.Errorf("open agent lock: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return "", nil, fmt.Errorf("chmod agent lock %s: %w", path, err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := syscall.FcntlFlock(f.Fd(), fOFDSetlk, &lk); err != nil {
		f.Close()
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
			return "", nil, fmt.Errorf("%w: %s (only one agent may write %s)", ErrAgentLocked, path, agentFile)
		}
		return "", nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return LockFileName, func() { f.Close() }, nil
}

// probeLock tests the lock file at path without taking it: ok is false when
// the file cannot be opened or tested.
func probeLock(path string) (held, ok bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, false
	}
	defer f.Close() //nolint:errcheck // read-only
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return false, false
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := syscall.FcntlFlock(f.Fd(), fOFDGetlk, &lk); err != nil {
		return false, false
	}
	return lk.Type != syscall.F_UNLCK, true
}

// SelfProcess returns what identifies the calling process beyond its pid,
// for Agent.PIDNamespace and Agent.PIDStart: its pid namespace and its start
// time (clock ticks after boot). Either is zero when /proc does not tell.
func SelfProcess() (pidNamespace string, start uint64) {
	pidNamespace, _ = os.Readlink("/proc/self/ns/pid") // "" disables the pid check: the lock still tells
	if s, _, err := procStart("self"); err == nil {
		start = s
	}
	return pidNamespace, start
}

// procStart reads the start time and whether it is a zombie (state Z or X)
// of the process /proc/<pid>.
func procStart(pid string) (start uint64, dead bool, err error) {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, false, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and ')', so the
	// fields start after the last ')'. starttime is field 22, the 20th
	// after comm.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false, errors.New("malformed stat")
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 20 {
		return 0, false, errors.New("malformed stat")
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("malformed stat: %w", err)
	}
	return start, string(f[0]) == "Z" || string(f[0]) == "X", nil
}

// probe tells whether the writer of a, read from agentFile, still runs.
func (a Agent) probe(agentFile string) Process {
	if a.Lock != "" && filepath.Base(a.Lock) == a.Lock && a.Lock != "." && a.Lock != ".." {
		if held, ok := probeLock(filepath.Join(filepath.Dir(agentFile), a.Lock)); ok {
			if held {
				return ProcessRunning
			}
			return ProcessGone
		}
	}
	if a.PID <= 0 || a.PIDStart == 0 || a.PIDNamespace == "" {
		return ProcessUnknown
	}
	if ns, err := os.Readlink("/proc/self/ns/pid"); err != nil || ns != a.PIDNamespace {
		return ProcessUnknown // another pid namespace: the pid names another process, or none
	}
	start, dead, err := procStart(strconv.Itoa(a.PID))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return ProcessGone
	case err != nil:
		return ProcessUnknown
	case dead || start != a.PIDStart:
		return ProcessGone // a zombie, or the pid reused by another process
	}
	return ProcessRunning
}
