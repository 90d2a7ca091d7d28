// Package podkey is the identity of one pod attachment, in one place: the
// key (the CNI containerID and ifName), its grammar, the names of the files
// it gives (entries, statuses, deletion records) and the atomic file write
// every writer of those files uses. It imports the standard library only,
// so desired, observed, reconcile/status, linux and the CNI plugin can all
// use it (docs/design.md, "Identity and revisions").
package podkey

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Limits of a key's halves.
const (
	// MaxContainerIDLen bounds a container ID (runtimes use 64 hex digits)
	// so that a file name stays well under 255 bytes.
	MaxContainerIDLen = 128
	// MaxIfNameLen is Linux's IFNAMSIZ minus the terminating NUL.
	MaxIfNameLen = 15
)

// Key names one attachment: a container (the pod sandbox) and an interface
// inside it. desired.Key and observed.AttachmentKey are this type.
type Key struct {
	ContainerID string
	IfName      string
}

// String returns "<containerID>_<ifName>", the base of the attachment's
// file names. It is unambiguous because an ifName never holds "_".
func (k Key) String() string { return k.ContainerID + "_" + k.IfName }

// Compare orders keys as their strings order, without building the strings
// unless one container ID is a prefix of the other: lists of a node's
// attachments are sorted this way, and kept sorted on every change.
func (k Key) Compare(o Key) int {
	switch {
	case k.ContainerID == o.ContainerID:
		return strings.Compare(k.IfName, o.IfName)
	case !strings.HasPrefix(k.ContainerID, o.ContainerID) && !strings.HasPrefix(o.ContainerID, k.ContainerID):
		return strings.Compare(k.ContainerID, o.ContainerID)
	}
	return strings.Compare(k.String(), o.String())
}

// Validate checks both halves of the key by their grammars
// (CheckContainerID, CheckIfName) and reports every problem, "; "
// separated.
func (k Key) Validate() error {
	var ps []string
	if err := CheckContainerID(k.ContainerID); err != nil {
		ps = append(ps, err.Error())
	}
	if err := CheckIfName(k.IfName); err != nil {
		ps = append(ps, err.Error())
	}
	if len(ps) > 0 {
		return errors.New(strings.Join(ps, "; "))
	}
	return nil
}

// containerIDRe is the CNI spec's grammar for CNI_CONTAINERID.
var containerIDRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// CheckContainerID applies the CNI spec's grammar for a container ID
// (letters, digits, "_", "." and "-", starting with a letter or digit) and
// enid's bound (MaxContainerIDLen).
func CheckContainerID(id string) error {
	switch {
	case id == "":
		return errors.New("containerID: required")
	case len(id) > MaxContainerIDLen:
		return fmt.Errorf("containerID: longer than %d characters (got %d)", MaxContainerIDLen, len(id))
	case !containerIDRe.MatchString(id):
		return fmt.Errorf("containerID: must be letters, digits, '_', '.' and '-', starting with a letter or digit (got %q)", Clip(id))
	}
	return nil
}

// CheckIfName applies Linux's rules for interface names (1 to 15 bytes, not
// "." or "..", no '/', ':' or white space) plus enid's: printable ASCII and
// no '_', which keeps "<containerID>_<ifName>" unambiguous.
func CheckIfName(n string) error {
	switch {
	case n == "":
		return errors.New("ifName: required")
	case len(n) > MaxIfNameLen:
		return fmt.Errorf("ifName: longer than %d bytes (got %q)", MaxIfNameLen, Clip(n))
	case n == "." || n == "..":
		return fmt.Errorf("ifName: not a valid interface name (got %q)", n)
	}
	for _, r := range n {
		if r <= ' ' || r >= 0x7f || r == '/' || r == ':' || r == '_' {
			return fmt.Errorf("ifName: must be printable ASCII without '/', ':', '_' or spaces (got %q)", Clip(n))
		}
	}
	return nil
}

// Clip shortens s for an error message (a hostile value may be long).
func Clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// File name suffixes: an attachment's entry (in the entries dir) and its
// status (in the status dir) are "<key>.json"; CNI DEL's deletion record
// (in the entries dir) is "<key>.del".
const (
	JSONSuffix     = ".json"
	DeletionSuffix = ".del"
)

// FileName returns "<containerID>_<ifName>.json", the name of the key's
// entry and of its status.
func FileName(k Key) string { return k.String() + JSONSuffix }

// DeletionFileName returns "<containerID>_<ifName>.del", the name of the
// key's deletion record.
func DeletionFileName(k Key) string { return k.String() + DeletionSuffix }

// FromFileName parses a file name "<containerID>_<ifName><suffix>" back to
// its key; ok is false when the name does not end in suffix or its key is
// not valid.
func FromFileName(name, suffix string) (Key, bool) {
	base, found := strings.CutSuffix(name, suffix)
	if !found {
		return Key{}, false
	}
	i := strings.LastIndex(base, "_")
	if i < 0 {
		return Key{}, false
	}
	k := Key{ContainerID: base[:i], IfName: base[i+1:]}
	if k.Validate() != nil {
		return Key{}, false
	}
	return k, true
}
