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

	"github.com/enidnet/enid/internal/podkey"
)

// Pod annotations enid reads from an entry.
const (
	// AnnotationStickyIP "true" keeps the pod's IP for stickyIPHold after
	// the pod is deleted, for a pod of the same namespace/name.
	AnnotationStickyIP = "enid.dev/sticky-ip"
	// AnnotationTerwayIPReservation is Terway's equivalent, honoured so
	// workloads migrate unchanged.
	AnnotationTerwayIPReservation = "k8s.aliyun.com/pod-ip-reservation"
	// AnnotationSecurityGroups lists the security groups the pod's ENI
	// must carry ("sg-a,sg-b"; order does not matter): the pod gets an
	// address only on an ENI with exactly that set.
	AnnotationSecurityGroups = "enid.dev/security-groups"
)

// Limits of an entry file and its fields.
const (
	// MaxEntrySize bounds an entry file: above Kubernetes' 256 KiB limit
	// on a pod's annotations, with room for the rest.
	MaxEntrySize = 512 << 10
	// MaxContainerIDLen bounds a container ID (podkey.MaxContainerIDLen).
	MaxContainerIDLen = podkey.MaxContainerIDLen
	// MaxIfNameLen is Linux's IFNAMSIZ minus the terminating NUL.
	MaxIfNameLen = podkey.MaxIfNameLen
	// MaxNetNSLen is PATH_MAX.
	MaxNetNSLen = 4096
)

// ErrInvalidEntry is wrapped by every entry validation and parse error.
var ErrInvalidEntry = errors.New("invalid entry")

// Key names one attachment: a container (the pod sandbox) and an interface
// inside it. It is podkey.Key, as is observed.AttachmentKey: one identity
// with one grammar and one file name.
type Key = podkey.Key

// validKey checks both halves of the key by their grammars; the error wraps
// ErrInvalidEntry.
func validKey(k Key) error {
	if err := k.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	return nil
}

// EntryFileName returns the file name of the key's entry.
func EntryFileName(key Key) string { return podkey.FileName(key) }

// DeletionFileName returns the file name of the key's deletion record
// (see EntryStore.MarkDeleted).
func DeletionFileName(key Key) string { return podkey.DeletionFileName(key) }

// KeyFromFileName parses an entry file name back to its key; ok is false
// when the name is not a valid entry file name.
func KeyFromFileName(name string) (Key, bool) { return podkey.FromFileName(name, podkey.JSONSuffix) }

// KeyFromDeletionFileName parses a deletion record's file name back to its
// key; ok is false when the name is not one.
func KeyFromDeletionFileName(name string) (Key, bool) {
	return podkey.FromFileName(name, podkey.DeletionSuffix)
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
	dns1123Label  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	podUIDRe      = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9\-]*$`)
	qualifiedName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

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

func clip(s string) string { return podkey.Clip(s) }

// Validate checks every field of the entry and reports all problems at once,
// wrapped in ErrInvalidEntry.
func (e Entry) Validate() error {
	var ps []string
	add := func(format string, args ...any) { ps = append(ps, fmt.Sprintf(format, args...)) }
	if e.APIVersion != EntryAPIVersion {
		add("apiVersion: must be %q (got %q)", EntryAPIVersion, clip(e.APIVersion))
	}
	if err := podkey.CheckContainerID(e.ContainerID); err != nil {
		add("%v", err)
	}
	if err := podkey.CheckIfName(e.IfName); err != nil {
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
