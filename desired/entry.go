package desired

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Pod annotations enid reads from an entry.
const (
	// AnnotationStickyIP "true" keeps the pod's IP for stickyIPHold after
	// the pod is deleted, for a pod of the same namespace/name.
	AnnotationStickyIP = "enid.dev/sticky-ip"
	// AnnotationTerwayIPReservation is Terway's equivalent, honoured so
	// workloads migrate unchanged.
	AnnotationTerwayIPReservation = "k8s.aliyun.com/pod-ip-reservation"
)

// Limits of an entry file and its fields.
const (
	// MaxEntrySize bounds an entry file: above Kubernetes' 256 KiB limit
	// on a pod's annotations, with room for the rest.
	MaxEntrySize = 512 << 10
	// MaxContainerIDLen bounds a container ID (runtimes use 64 hex digits)
	// so that a file name stays well under 255 bytes.
	MaxContainerIDLen = 128
	// MaxIfNameLen is Linux's IFNAMSIZ minus the terminating NUL.
	MaxIfNameLen = 15
	// MaxNetNSLen is PATH_MAX.
	MaxNetNSLen = 4096
)

// ErrInvalidEntry is wrapped by every entry validation and parse error.
var ErrInvalidEntry = errors.New("invalid entry")

// Key names one attachment: a container (the pod sandbox) and an interface
// inside it.
type Key struct {
	ContainerID string
	IfName      string
}

// String returns "<containerID>_<ifName>", the entry's file name without
// ".json". It is unambiguous because an ifName never holds "_".
func (k Key) String() string { return k.ContainerID + "_" + k.IfName }

// Validate checks both halves of the key by their grammars.
func (k Key) Validate() error {
	var ps []string
	if err := checkContainerID(k.ContainerID); err != nil {
		ps = append(ps, err.Error())
	}
	if err := checkIfName(k.IfName); err != nil {
		ps = append(ps, err.Error())
	}
	if len(ps) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidEntry, strings.Join(ps, "; "))
	}
	return nil
}

// EntryFileName returns the file name of the key's entry.
func EntryFileName(key Key) string { return key.String() + ".json" }

// DeletionFileName returns the file name of the key's deletion record
// (see EntryStore.MarkDeleted).
func DeletionFileName(key Key) string { return key.String() + deletionSuffix }

// deletionSuffix ends the name of a deletion record in the entries dir.
const deletionSuffix = ".del"

// KeyFromFileName parses an entry file name back to its key; ok is false
// when the name is not a valid entry file name.
func KeyFromFileName(name string) (Key, bool) { return keyFromName(name, ".json") }

// KeyFromDeletionFileName parses a deletion record's file name back to its
// key; ok is false when the name is not one.
func KeyFromDeletionFileName(name string) (Key, bool) { return keyFromName(name, deletionSuffix) }

func keyFromName(name, suffix string) (Key, bool) {
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

// Key returns the entry's key.
func (e Entry) Key() Key { return Key{ContainerID: e.ContainerID, IfName: e.IfName} }

// WantsStickyIP reports whether the pod asked to keep its IP across
// deletion (either annotation set to "true").
func (e Entry) WantsStickyIP() bool {
	return e.Annotations[AnnotationStickyIP] == "true" || e.Annotations[AnnotationTerwayIPReservation] == "true"
}

// Revision identifies an entry's exact bytes: the first 16 hex digits of
// their SHA-256.
func Revision(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16]
}

var (
	// containerIDRe is the CNI spec's grammar for CNI_CONTAINERID.
	containerIDRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
	dns1123Label  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	podUIDRe      = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9\-]*$`)
	qualifiedName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

func checkContainerID(id string) error {
	switch {
	case id == "":
		return errors.New("containerID: required")
	case len(id) > MaxContainerIDLen:
		return fmt.Errorf("containerID: longer than %d characters (got %d)", MaxContainerIDLen, len(id))
	case !containerIDRe.MatchString(id):
		return fmt.Errorf("containerID: must be letters, digits, '_', '.' and '-', starting with a letter or digit (got %q)", clip(id))
	}
	return nil
}

// checkIfName applies Linux's rules for interface names (1 to 15 bytes, not
// "." or "..", no '/', ':' or white space) plus enid's: printable ASCII and
// no '_', which keeps "<containerID>_<ifName>" unambiguous.
func checkIfName(n string) error {
	switch {
	case n == "":
		return errors.New("ifName: required")
	case len(n) > MaxIfNameLen:
		return fmt.Errorf("ifName: longer than %d bytes (got %q)", MaxIfNameLen, clip(n))
	case n == "." || n == "..":
		return fmt.Errorf("ifName: not a valid interface name (got %q)", n)
	}
	for _, r := range n {
		if r <= ' ' || r >= 0x7f || r == '/' || r == ':' || r == '_' {
			return fmt.Errorf("ifName: must be printable ASCII without '/', ':', '_' or spaces (got %q)", clip(n))
		}
	}
	return nil
}

func checkDNS1123Subdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !dns1123Label.MatchString(l) {
			return false
		}
	}
	return true
}

// checkAnnotationKey applies Kubernetes' qualified-name rules: an optional
// DNS-subdomain prefix and '/', then a name of at most 63 characters.
func checkAnnotationKey(k string) bool {
	prefix, name, found := strings.Cut(k, "/")
	if !found {
		name, prefix = prefix, ""
	} else if !checkDNS1123Subdomain(prefix) {
		return false
	}
	return len(name) <= 63 && qualifiedName.MatchString(name)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Validate checks every field of the entry and reports all problems at once,
// wrapped in ErrInvalidEntry.
func (e Entry) Validate() error {
	var ps []string
	add := func(format string, args ...any) { ps = append(ps, fmt.Sprintf(format, args...)) }
	if e.APIVersion != EntryAPIVersion {
		add("apiVersion: must be %q (got %q)", EntryAPIVersion, clip(e.APIVersion))
	}
	if err := checkContainerID(e.ContainerID); err != nil {
		add("%v", err)
	}
	if err := checkIfName(e.IfName); err != nil {
		add("%v", err)
	}
	switch {
	case e.NetNS == "":
		add("netns: required")
	case len(e.NetNS) > MaxNetNSLen:
		add("netns: longer than %d bytes", MaxNetNSLen)
	case !filepath.IsAbs(e.NetNS) || filepath.Clean(e.NetNS) != e.NetNS || strings.ContainsRune(e.NetNS, 0):
		add("netns: must be a clean absolute path without '..' (got %q)", clip(e.NetNS))
	}
	if len(e.PodNamespace) > 63 || !dns1123Label.MatchString(e.PodNamespace) {
		add("podNamespace: must be a DNS-1123 label (got %q)", clip(e.PodNamespace))
	}
	if !checkDNS1123Subdomain(e.PodName) {
		add("podName: must be a DNS-1123 subdomain (got %q)", clip(e.PodName))
	}
	if e.PodUID != "" && (len(e.PodUID) > 128 || !podUIDRe.MatchString(e.PodUID)) {
		add("podUID: must be letters, digits and '-' (got %q)", clip(e.PodUID))
	}
	for _, k := range sortedKeys(e.Annotations) {
		if !checkAnnotationKey(k) {
			add("annotations[%s]: not a valid annotation key", clip(k))
		}
		if !utf8.ValidString(e.Annotations[k]) {
			add("annotations[%s]: value is not valid UTF-8", clip(k))
		}
	}
	if e.Created.IsZero() {
		add("created: required")
	}
	if len(ps) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidEntry, strings.Join(ps, "; "))
	}
	return nil
}

// ParseEntry reads one entry file's bytes strictly: one JSON object, no
// unknown, misspelled or duplicate keys, every field valid. It fills
// Revision from the bytes.
func ParseEntry(data []byte) (Entry, error) {
	if len(data) > MaxEntrySize {
		return Entry{}, fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrInvalidEntry, len(data), MaxEntrySize)
	}
	v, err := decodeGeneric(data)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrInvalidEntry, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return Entry{}, fmt.Errorf("%w: must be a JSON object (got %s)", ErrInvalidEntry, describe(v))
	}
	var e Entry
	d := &strictDecoder{}
	d.decode("", v, reflect.ValueOf(&e).Elem())
	if len(d.problems) > 0 {
		ps := make([]string, len(d.problems))
		for i, p := range d.problems {
			ps[i] = p.String()
		}
		return Entry{}, fmt.Errorf("%w: %s", ErrInvalidEntry, strings.Join(ps, "; "))
	}
	if err := e.Validate(); err != nil {
		return Entry{}, err
	}
	e.Revision = Revision(data)
	return e, nil
}
