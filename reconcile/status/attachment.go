package status

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/enidnet/enid/internal/fileread"
	"github.com/enidnet/enid/internal/podkey"
)

// Version is the apiVersion written in every status file and heartbeat.
// Readers refuse any other value with ErrVersion.
const Version = "enid.dev/v1alpha1"

// MaxFileSize bounds what a reader of a status file or the heartbeat reads
// (a status is under a kilobyte; the heartbeat lists at most a few errors).
// A larger file is refused, never read whole.
const MaxFileSize = 1 << 20

// ErrVersion is returned when a file carries an apiVersion this package
// does not know.
var ErrVersion = errors.New("unsupported status apiVersion")

// Phase is where an attachment stands.
type Phase string

// Phases of an attachment.
const (
	// Pending: the agent has seen the entry and is working on it; Reason
	// says what it waits for.
	Pending Phase = "Pending"
	// Ready: the pod's interface is set up; IPs, Routes and Interface hold
	// what the CNI plugin returns.
	Ready Phase = "Ready"
	// Failed: the agent cannot serve this entry revision (bad entry,
	// exhausted vSwitch, ...); Reason says why. The agent keeps trying
	// when the cause may pass, and publishes again.
	Failed Phase = "Failed"
)

// Attachment is the status of one pod attachment, the file
// <dir>/<containerID>_<ifName>.json. It names the entry revision it
// answers, so a reader never takes an answer to an older entry for an
// answer to the current one.
type Attachment struct {
	APIVersion  string `json:"apiVersion"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// Revision is the revision of the entry this status answers
	// (desired.Entry.Revision). Empty when the entry could not be read.
	Revision string `json:"revision"`
	Phase    Phase  `json:"phase"`
	// Reason is a human-readable explanation; required when Failed.
	Reason string `json:"reason,omitempty"`
	// ReasonCode is a stable, machine-readable kebab-case code for Reason,
	// one of the planner's reason codes (e.g. "vswitch-exhausted",
	// "entry-invalid"; docs/plan.schema.json lists them).
	ReasonCode string `json:"reasonCode,omitempty"`
	// IPs are the pod's addresses: ip/32 or ip/128 in shared mode, the
	// address within its vSwitch prefix in exclusive mode. At least one
	// when Ready.
	IPs []IPConfig `json:"ips,omitempty"`
	// Routes are the pod's routes; when empty, a default route via each
	// IP's gateway is implied.
	Routes []Route `json:"routes,omitempty"`
	// Interface is the pod-side interface.
	Interface Interface `json:"interface,omitzero"`
	// ENIID and ENIMAC name the ENI that carries the pod's addresses.
	ENIID  string `json:"eniID,omitempty"`
	ENIMAC string `json:"eniMAC,omitempty"`
	// Exclusive is true when the whole ENI was moved into the pod.
	Exclusive bool `json:"exclusive,omitempty"`
	// Updated is when the agent published this status.
	Updated time.Time `json:"updated"`
}

// IPConfig is one pod address and its gateway.
type IPConfig struct {
	Address netip.Prefix `json:"address"`
	// Gateway is the next hop of the pod's default route for this family;
	// the zero Addr when none.
	Gateway netip.Addr `json:"gateway,omitzero"`
}

// Route is one route inside the pod.
type Route struct {
	Dst netip.Prefix `json:"dst"`
	// GW is the next hop; the zero Addr means on-link.
	GW netip.Addr `json:"gw,omitzero"`
}

// Interface is the pod-side network interface.
type Interface struct {
	Name string `json:"name,omitempty"`
	// MAC is lower-case, colon separated.
	MAC string `json:"mac,omitempty"`
	// Sandbox is the netns path the interface lives in.
	Sandbox string `json:"sandbox,omitempty"`
}

// FileName returns the status file name of an attachment:
// "<containerID>_<ifName>.json".
func FileName(containerID, ifName string) string {
	return podkey.FileName(podkey.Key{ContainerID: containerID, IfName: ifName})
}

// Validate reports the first thing wrong with a, or nil.
func (a Attachment) Validate() error {
	if a.APIVersion != Version {
		return fmt.Errorf("%w %q (want %q)", ErrVersion, a.APIVersion, Version)
	}
	if err := CheckKey(a.ContainerID, a.IfName); err != nil {
		return err
	}
	switch a.Phase {
	case Pending:
	case Ready:
		if len(a.IPs) == 0 {
			return errors.New("phase Ready needs at least one IP")
		}
	case Failed:
		if a.Reason == "" {
			return errors.New("phase Failed needs a reason")
		}
	default:
		return fmt.Errorf("unknown phase %q (want Pending, Ready or Failed)", a.Phase)
	}
	for i, ip := range a.IPs {
		if !ip.Address.IsValid() {
			return fmt.Errorf("ips[%d]: address missing or invalid", i)
		}
		if ip.Gateway.IsValid() && ip.Gateway.Is4() != ip.Address.Addr().Is4() {
			return fmt.Errorf("ips[%d]: gateway %s is not in the family of %s", i, ip.Gateway, ip.Address)
		}
	}
	for i, r := range a.Routes {
		if !r.Dst.IsValid() {
			return fmt.Errorf("routes[%d]: dst missing or invalid", i)
		}
	}
	return nil
}

// CheckKey reports whether containerID and ifName can name a file, by the
// same grammar as pod entries (podkey.Key.Validate).
func CheckKey(containerID, ifName string) error {
	return podkey.Key{ContainerID: containerID, IfName: ifName}.Validate()
}

// WriteFileAtomic is podkey.WriteFileAtomic: the one atomic write of every
// file enid publishes.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return podkey.WriteFileAtomic(path, data, perm)
}

// Store reads and writes attachment statuses in one directory (normally
// /run/enid/status). Concurrent use is safe; the writer is the agent alone.
type Store struct {
	dir string
	// mu guards cache: ReadAll's statuses by file name, with the identity
	// of the file each was read from. The agent reads every status back at
	// each full observation; a file whose identity is unchanged is not
	// read and decoded again (one fstatat instead).
	mu    sync.Mutex
	cache map[string]cachedStatus
}

type cachedStatus struct {
	id fileread.ID
	a  Attachment
}

// NewStore returns a Store over dir; the directory is created on first
// Write.
func NewStore(dir string) *Store { return &Store{dir: dir} }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the file path of an attachment's status.
func (s *Store) Path(containerID, ifName string) string {
	return filepath.Join(s.dir, FileName(containerID, ifName))
}

// Write publishes a atomically. An empty APIVersion is filled with Version;
// an invalid a is refused.
func (s *Store) Write(a Attachment) error {
	if a.APIVersion == "" {
		a.APIVersion = Version
	}
	if err := a.Validate(); err != nil {
		return fmt.Errorf("write status %s_%s: %w", a.ContainerID, a.IfName, err)
	}
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return fmt.Errorf("encode status %s_%s: %w", a.ContainerID, a.IfName, err)
	}
	return podkey.WriteFileAtomicMkdir(s.Path(a.ContainerID, a.IfName), append(data, '\n'), 0o644, 0o755)
}

// Read returns the status of one attachment. The error wraps
// fs.ErrNotExist when there is none, and ErrVersion when the file has an
// unknown apiVersion.
func (s *Store) Read(containerID, ifName string) (Attachment, error) {
	if err := CheckKey(containerID, ifName); err != nil {
		return Attachment{}, fmt.Errorf("read status: %w", err)
	}
	return readAttachment(s.Path(containerID, ifName), containerID, ifName)
}

// Problem is a status file that could not be used.
type Problem struct {
	// File is the file name (not a path).
	File string
	Err  error
}

// Error implements error.
func (p Problem) Error() string { return p.File + ": " + p.Err.Error() }

// Unwrap returns the underlying error.
func (p Problem) Unwrap() error { return p.Err }

// ReadAll returns every valid status in the directory, sorted by file name,
// and one Problem per file that could not be used. Temporary files (names
// starting with ".") and files not ending in ".json" are skipped. A missing
// directory holds no statuses. The error is set only when the directory
// itself cannot be read. A status is read again only when its file's
// identity (inode, size, times) changed since the last ReadAll; the
// statuses returned share their slices with that cache, so callers must
// not modify them.
func (s *Store) ReadAll() ([]Attachment, []Problem, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read status dir: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(ents))
	var out []Attachment
	var problems []Problem
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") || e.IsDir() {
			continue
		}
		path := filepath.Join(s.dir, name)
		id, idOK := fileread.LstatID(path)
		if c, ok := s.cache[name]; ok && idOK && c.id == id {
			seen[name] = true
			out = append(out, c.a)
			continue
		}
		a, err := readAttachment(path, "", "")
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing: not a problem
		}
		if err == nil && name != FileName(a.ContainerID, a.IfName) {
			err = fmt.Errorf("file name does not match its content %s", FileName(a.ContainerID, a.IfName))
		}
		if err != nil {
			problems = append(problems, Problem{File: name, Err: err})
			continue
		}
		if idOK {
			if s.cache == nil {
				s.cache = map[string]cachedStatus{}
			}
			s.cache[name] = cachedStatus{id: id, a: a}
			seen[name] = true
		}
		out = append(out, a)
	}
	for name := range s.cache {
		if !seen[name] {
			delete(s.cache, name)
		}
	}
	return out, problems, nil
}

// Remove deletes an attachment's status; an absent one is not an error.
func (s *Store) Remove(containerID, ifName string) error {
	if err := CheckKey(containerID, ifName); err != nil {
		return fmt.Errorf("remove status: %w", err)
	}
	err := os.Remove(s.Path(containerID, ifName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove status: %w", err)
	}
	return podkey.SyncDir(s.dir)
}

// readAttachment decodes and validates one status file; when containerID is
// not empty the content must name that attachment.
func readAttachment(path, containerID, ifName string) (Attachment, error) {
	// Only the agent writes here, and never a symlink: a FIFO, device or
	// symlink in its place is refused without blocking.
	data, err := fileread.Read(path, MaxFileSize, fileread.NoFollow)
	if err != nil {
		return Attachment{}, fmt.Errorf("read status: %w", err)
	}
	var a Attachment
	if err := decode(data, &a); err != nil {
		return Attachment{}, fmt.Errorf("decode status %s: %w", filepath.Base(path), err)
	}
	if err := a.Validate(); err != nil {
		return Attachment{}, fmt.Errorf("status %s: %w", filepath.Base(path), err)
	}
	if containerID != "" && (a.ContainerID != containerID || a.IfName != ifName) {
		return Attachment{}, fmt.Errorf("status %s names another attachment %s_%s", filepath.Base(path), a.ContainerID, a.IfName)
	}
	return a, nil
}

// decode reads one JSON document. Unknown fields are accepted so that a
// reader keeps working when a newer agent adds fields within the same
// apiVersion; the apiVersion is checked by the caller.
func decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON document")
	}
	return nil
}
