package cloud

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// ClientToken derives an ECS ClientToken from the stable identity of what a
// call is for (for example the instance ID, "eni", the desired slot name and
// its generation). The same parts always give the same token, across
// restarts, so a call repeated after a crash or a lost answer has no second
// effect; different parts give different tokens. The token is "enid-"
// followed by 56 lower-case hex digits: 61 ASCII characters, within the
// 64 that ECS allows.
func ClientToken(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		// Length-prefix each part so ("ab","c") and ("a","bc") differ.
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return "enid-" + hex.EncodeToString(h.Sum(nil))[:56]
}
