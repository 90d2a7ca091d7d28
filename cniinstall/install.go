// Package cniinstall puts enid's CNI plugin binary and its network list
// (conflist) on the node, where the container runtime finds them: the bin
// dir and the conf dir of containerd's CRI (/opt/cni/bin, /etc/cni/net.d).
// It sits outside the desired -> observed -> plan -> execute chain: it is
// how a node gets the plugin at all, run by `enid install-cni` (the
// DaemonSet's init container, for the binary) and by `enid run` (the
// agent, for the list, once it serves; docs/deploy.md says why then).
//
// Every install is atomic and idempotent. The content goes to a hidden
// temporary file in the destination directory, is fsynced, and is renamed
// over the final name (internal/podkey.WriteFileAtomic), so the final path
// changes only by that rename: a runtime never execs a half-written binary
// or loads a half-written list, and replacing a binary that a CNI call is
// running is safe (the running process keeps the old inode; writing in
// place would fail with ETXTBSY or corrupt it). A file whose content and
// mode are already right is not touched at all, so running the installer
// again (every agent restart) changes nothing and wakes no watcher.
// Temporary files an interrupted earlier run left behind are removed.
package cniinstall

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/enidnet/enid/internal/fileread"
	"github.com/enidnet/enid/internal/podkey"
)

// Where the plugin and its list go on a node by default: containerd's and
// CRI-O's default CNI bin_dir and conf_dir.
const (
	DefaultBinDir  = "/opt/cni/bin"
	DefaultConfDir = "/etc/cni/net.d"
)

// Where the enid image carries what it installs (package image builds it).
const (
	// PluginName is the plugin's file name in the bin dir: the conflist's
	// "type" names it.
	PluginName = "enid-cni"
	// ConflistName is the list's file name in the conf dir. The runtime
	// loads the lexically first list there; "10-" sorts before most.
	ConflistName = "10-enid.conflist"
	// ImageConflist is the list's path in the image.
	ImageConflist = "/usr/share/enid/cni/" + ConflistName
)

// Size bounds of the sources: a plugin binary is a few MiB, a list a few
// hundred bytes; anything far larger is the wrong file.
const (
	maxBinary   = 256 << 20
	maxConflist = 1 << 20
)

// File is one file to install.
type File struct {
	// Src is the source path (a regular file; symlinks are followed).
	Src string
	// Dir is the destination directory. It must exist: a missing one is
	// almost always a wrong path that no runtime reads.
	Dir string
	// Name is the destination file name in Dir.
	Name string
	// Mode is the destination file's permission bits.
	Mode fs.FileMode
	// Limit bounds the source's size in bytes.
	Limit int64
	// Check validates the source's content; nil accepts anything.
	Check func([]byte) error
}

// Plugin is the plugin binary src installed as enid-cni in binDir.
func Plugin(src, binDir string) File {
	return File{Src: src, Dir: binDir, Name: PluginName, Mode: 0o755, Limit: maxBinary, Check: checkExecutable}
}

// Conflist is the network list src installed as 10-enid.conflist in
// confDir.
func Conflist(src, confDir string) File {
	return File{Src: src, Dir: confDir, Name: ConflistName, Mode: 0o644, Limit: maxConflist, Check: CheckConflist}
}

// Change is what Ensure did to one file.
type Change struct {
	// Path is the destination path.
	Path string
	// Action is "installed" (it was absent), "replaced" (its content or
	// mode differed) or "unchanged".
	Action string
	// SHA256 is the hex digest of the content now at Path.
	SHA256 string
	// Size is the content's length in bytes.
	Size int
	// Removed lists the temporary files of interrupted earlier runs that
	// were removed.
	Removed []string
}

// String renders the change as one log line.
func (c Change) String() string {
	s := fmt.Sprintf("%s %s (%d bytes, sha256 %s)", c.Action, c.Path, c.Size, c.SHA256[:12])
	if len(c.Removed) > 0 {
		s += "; removed leftovers " + strings.Join(c.Removed, ", ")
	}
	return s
}

// Ensure makes f.Dir/f.Name hold f.Src's content with f.Mode, replacing it
// only by an atomic rename and not at all when it is already right. Errors
// name the path and what to do.
func Ensure(f File) (Change, error) {
	dst := filepath.Join(f.Dir, f.Name)
	ch := Change{Path: dst}
	data, err := f.load()
	if err != nil {
		return ch, err
	}
	sum := sha256.Sum256(data)
	ch.SHA256, ch.Size = hex.EncodeToString(sum[:]), len(data)
	if ch.Removed, err = removeLeftovers(f.Dir, f.Name); err != nil {
		return ch, err
	}
	switch same, err := holds(dst, data, f.Mode, f.Limit); {
	case err != nil:
		return ch, err
	case same:
		ch.Action = "unchanged"
		return ch, nil
	}
	ch.Action = "replaced"
	if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		ch.Action = "installed"
	}
	if err := podkey.WriteFileAtomic(dst, data, f.Mode); err != nil {
		return ch, fmt.Errorf("install %s: %w (%s)", dst, err, dstHint(err, f.Dir))
	}
	return ch, nil
}

// Validate checks what Ensure needs without writing anything: the source
// is readable and valid, and the destination directory exists. A command
// calls it at start, so a wrong path fails at once rather than when the
// file is due.
func (f File) Validate() error {
	_, err := f.load()
	return err
}

// load reads and checks the source, and checks the destination directory.
func (f File) load() ([]byte, error) {
	data, err := fileread.Read(f.Src, f.Limit, fileread.Follow)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w (%s)", f.Src, err, srcHint(err))
	}
	if f.Check != nil {
		if err := f.Check(data); err != nil {
			return nil, fmt.Errorf("%s is not a valid %s: %w", f.Src, f.Name, err)
		}
	}
	st, err := os.Stat(f.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("directory %s does not exist: it must be the container runtime's CNI directory "+
			"(containerd: bin_dir and conf_dir under [plugins.\"io.containerd.grpc.v1.cri\".cni]) as mounted here; create it or pass the right one", f.Dir)
	case err != nil:
		return nil, fmt.Errorf("directory %s: %w", f.Dir, err)
	case !st.IsDir():
		return nil, fmt.Errorf("%s is not a directory: pass the container runtime's CNI directory", f.Dir)
	}
	return data, nil
}

// holds reports whether dst is a regular file with exactly data and mode.
func holds(dst string, data []byte, mode fs.FileMode, limit int64) (bool, error) {
	st, err := os.Lstat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("stat %s: %w", dst, err)
	case st.IsDir():
		return false, fmt.Errorf("%s is a directory: remove it so the file can be installed", dst)
	case !st.Mode().IsRegular() || st.Mode().Perm() != mode.Perm() || st.Size() != int64(len(data)):
		return false, nil // a symlink, another mode or size: replaced by the rename
	}
	have, err := fileread.Read(dst, limit, fileread.NoFollow)
	if err != nil {
		return false, nil //nolint:nilerr // unreadable: replacing it is the fix
	}
	return bytes.Equal(have, data), nil
}

// removeLeftovers removes the temporary files podkey.WriteFileAtomic
// names for name in dir (".<name>.<random>.tmp"): a run killed between
// their creation and the rename leaves them, and nothing else ever reads
// them.
func removeLeftovers(dir, name string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, podkey.TempGlob(name)))
	if err != nil {
		return nil, fmt.Errorf("list leftovers in %s: %w", dir, err)
	}
	var removed []string
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("remove leftover %s: %w (%s)", m, err, dstHint(err, dir))
		}
		removed = append(removed, m)
	}
	return removed, nil
}

// srcHint says what to do about a source that cannot be read.
func srcHint(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "run this from the enid image, which carries it, or pass its path"
	case errors.Is(err, fileread.ErrNotRegular):
		return "pass a regular file"
	case errors.Is(err, fileread.ErrTooLarge):
		return "is this the right file?"
	}
	return "check its permissions"
}

// dstHint says what to do about a destination that cannot be written.
func dstHint(err error, dir string) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return dir + " is read-only: mount the host directory read-write (no readOnly on its volume mount)"
	case errors.Is(err, fs.ErrPermission):
		return "no permission to write " + dir + ": run as root (the init container is privileged)"
	case errors.Is(err, syscall.ENOSPC):
		return "the file system of " + dir + " is full"
	}
	return "check that " + dir + " is the host's CNI directory, mounted read-write"
}

// checkExecutable accepts an ELF executable: a runtime must be able to
// exec what it finds under the plugin's name.
func checkExecutable(b []byte) error {
	if !bytes.HasPrefix(b, []byte("\x7fELF")) {
		return errors.New("not an ELF executable")
	}
	return nil
}

// CheckConflist accepts a CNI network list that names a network and has
// a plugin of type enid-cni: what a runtime needs to load it and call enid.
func CheckConflist(b []byte) error {
	var l struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	switch {
	case l.CNIVersion == "":
		return errors.New(`"cniVersion" is missing`)
	case l.Name == "":
		return errors.New(`"name" is missing`)
	}
	for _, p := range l.Plugins {
		if p.Type == PluginName {
			return nil
		}
	}
	return fmt.Errorf(`"plugins" has no entry of "type": %q`, PluginName)
}
