package reconcile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/enidnet/enid/internal/fileread"
	"github.com/enidnet/enid/internal/podkey"
	"github.com/enidnet/enid/planner"
)

// This file persists the planner's memory under the state dir (memory.json)
// and holds the state dir's single-agent lock.

// memoryFile is where the planner's memory is kept between restarts.
func (a *Agent) memoryFile() string { return filepath.Join(a.cfg.Paths.StateDir, "memory.json") }

// maxMemoryFile bounds the planner memory read at start. The memory holds
// a few timestamps per address (cooldowns, sticky reservations, leak
// stamps): under 100 bytes each, so a node with thousands of addresses
// writes well under a megabyte.
const maxMemoryFile = 16 << 20

// loadMemory reads the planner's memory. A damaged one (not JSON, too
// large, a directory or FIFO in its place) loses cooldowns and sticky
// reservations, not addresses: bindings are observed again. The agent
// starts afresh and says so in its log and in agent.json's lastErrors, and
// moves a non-file aside so the next save can take its place.
func (a *Agent) loadMemory() {
	path := a.memoryFile()
	b, err := fileread.Read(path, maxMemoryFile, fileread.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var m planner.Memory
	if err == nil {
		if err = json.Unmarshal(b, &m); err != nil {
			err = fmt.Errorf("parse %s: %w", path, err)
		}
	}
	if err != nil {
		msg := fmt.Sprintf("planner memory unreadable, started without it (cooldowns and sticky reservations lost): %v", err)
		if errors.Is(err, fileread.ErrNotRegular) || errors.Is(err, fileread.ErrSymlink) {
			if rerr := os.Rename(path, path+".damaged"); rerr != nil {
				msg += fmt.Sprintf("; moving it aside failed: %v", rerr)
			} else {
				msg += "; moved aside to " + path + ".damaged"
			}
		}
		a.log.Error(msg, "file", path)
		a.exec.note(msg)
		return
	}
	a.memory, a.memoryJSON = m, b
}

func (a *Agent) saveMemory(m planner.Memory) error {
	a.memory = m
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode planner memory: %w", err)
	}
	if bytes.Equal(b, a.memoryJSON) {
		return nil
	}
	if err := podkey.WriteFileAtomicMkdir(a.memoryFile(), b, 0o600, 0o700); err != nil {
		return fmt.Errorf("write planner memory: %w", err)
	}
	a.memoryJSON = b
	return nil
}

// lockStateDir takes the single-instance lock: an flock on
// <StateDir>/enid.lock, released by the kernel if the process dies.
func lockStateDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, "enid.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another enid agent holds %s: only one agent may run per node", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// ReadMemory reads the planner memory an agent persisted in stateDir (the
// zero Memory when there is none); `enid plan` plans with it.
func ReadMemory(stateDir string) (planner.Memory, error) {
	var m planner.Memory
	b, err := fileread.Read(filepath.Join(stateDir, "memory.json"), maxMemoryFile, fileread.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read planner memory: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("parse planner memory %s: %w", filepath.Join(stateDir, "memory.json"), err)
	}
	return m, nil
}
