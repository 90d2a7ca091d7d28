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

	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// memoryFile is where the planner's memory is kept between restarts.
func (a *Agent) memoryFile() string { return filepath.Join(a.cfg.Paths.StateDir, "memory.json") }

func (a *Agent) loadMemory() error {
	b, err := os.ReadFile(a.memoryFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read planner memory: %w", err)
	}
	var m planner.Memory
	if err := json.Unmarshal(b, &m); err != nil {
		// A damaged memory file loses cooldowns and sticky reservations,
		// not addresses: bindings are observed again. Start afresh, loudly.
		a.log.Error("planner memory unreadable: starting without it", "file", a.memoryFile(), "err", err)
		return nil
	}
	a.memory, a.memoryJSON = m, b
	return nil
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
	if err := os.MkdirAll(a.cfg.Paths.StateDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", a.cfg.Paths.StateDir, err)
	}
	if err := status.WriteFileAtomic(a.memoryFile(), b, 0o600); err != nil {
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
	b, err := os.ReadFile(filepath.Join(stateDir, "memory.json"))
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
