package planner

import "time"

// Outcome is what one executed action came back with, as the executor
// reports it: facts about the answer, no decision. What the answer means for
// later plans (a vSwitch to skip, a token to change, a set of security
// groups to stop creating) is decided here, by Memory.Learn, so that the
// rules live beside the plans they change and are tested without a cloud.
type Outcome struct {
	// Action is the action as it ran (references to a created ENI
	// resolved).
	Action Action
	// Err is the error's text ("" when the action succeeded).
	Err string
	// Class is the kind of failure ("" when the action succeeded): what
	// Memory.Learn backs the action off by, and what a failed pod setup's
	// status says (FailureClass).
	Class FailureClass
	// At is when the action ended (zero: at Learn's now). Its back-off
	// runs from then.
	At time.Time
	// VSwitchID is the vSwitch the action drew addresses from: the
	// action's own, or, for an assign, its ENI's.
	VSwitchID string
	// NoAddresses: the cloud answered that the vSwitch has no address (or
	// no aligned /28 prefix) left for the request (IpNotEnough).
	NoAddresses bool
	// GroupsRefused: the cloud refused the action's security groups (one
	// does not exist, is of another VPC, or is full).
	GroupsRefused bool
	// Definite: the cloud answered the call with a definite failure
	// (a non-5xx error other than "still in flight"), so a ClientToken sent
	// with it is burnt: ECS refuses every resend of it.
	Definite bool
}

// Failed reports whether the action failed.
func (o Outcome) Failed() bool { return o.Err != "" }

// Lesson is one thing Memory.Learn took from the outcomes, for the agent's
// log: what was marked, for which key, until when (zero: no end, as for a
// token changed).
type Lesson struct {
	// Kind is LessonExhausted, LessonFragmented, LessonRefusedGroups or
	// LessonTokenBurnt.
	Kind  string
	Key   string
	Until time.Time
}

// The kinds of Lesson.
const (
	// LessonExhausted: the vSwitch (Key) is skipped for new ENIs and
	// addresses until Until (MarkExhausted).
	LessonExhausted = "vswitch-exhausted"
	// LessonFragmented: no IPv4 prefix is asked of the vSwitch (Key) until
	// Until (MarkFragmented).
	LessonFragmented = "vswitch-fragmented"
	// LessonRefusedGroups: no ENI of the security-group set (Key, sorted
	// and comma-joined) is created until Until (MarkRefusedGroups).
	LessonRefusedGroups = "security-groups-refused"
	// LessonTokenBurnt: the call whose ClientToken is Key is planned with
	// a new token (TokenFailed).
	LessonTokenBurnt = "token-burnt"
	// LessonBackoff: the actions of the retry key Key (RetryKey.String)
	// wait until Until (Memory.Backoffs; the plan shows it as the
	// actions' NotBefore).
	LessonBackoff = "backoff"
)

// Learn returns a copy of m that has learned from the outcomes of actions
// that ended at now, and what it learned:
//   - every failure backs its retry key off (RetryKeyOf, BackoffDelay:
//     briefly when its class is retryable, long when not), from when the
//     action ended; a success ends its key's back-off;
//   - an action refused for want of addresses marks its vSwitch: as
//     fragmented when it asked for IPv4 prefixes (no free aligned /28; the
//     vSwitch may well have single addresses), else as exhausted;
//   - a CreateENI or UpdateENI refused for its security groups marks the
//     set as refused;
//   - a CreateENI or AssignIPs with a ClientToken that failed definitely
//     burns the token.
//
// The outcomes are taken in the order the actions ended. m is returned as
// is when nothing is learned.
func (m Memory) Learn(outs []Outcome, now time.Time) (Memory, []Lesson) {
	var lessons []Lesson
	cloned := false
	for _, o := range outs {
		key := RetryKeyOf(o.Action)
		if !o.Failed() {
			if _, ok := m.Backoffs[key]; ok {
				if !cloned {
					m, cloned = m.clone(), true
				}
				delete(m.Backoffs, key)
			}
			continue
		}
		if !cloned {
			m, cloned = m.clone(), true
		}
		at := o.At
		if at.IsZero() {
			at = now
		}
		b := m.backoffAfter(key, o, at)
		lessons = append(lessons, Lesson{Kind: LessonBackoff, Key: key.String(), Until: b.Until})
		m, lessons = m.learnRefusal(o, now, lessons)
	}
	return m, lessons
}

// learnRefusal is what one failed outcome teaches beyond its back-off (see
// Learn): marks and burnt tokens.
func (m Memory) learnRefusal(o Outcome, now time.Time, lessons []Lesson) (Memory, []Lesson) {
	a := o.Action
	switch {
	case o.NoAddresses && o.VSwitchID != "" && askedPrefixes(a):
		until := now.Add(DefaultFragmentedFor)
		m = m.MarkFragmented(o.VSwitchID, until)
		lessons = append(lessons, Lesson{Kind: LessonFragmented, Key: o.VSwitchID, Until: until})
	case o.NoAddresses && o.VSwitchID != "":
		until := now.Add(DefaultExhaustedFor)
		m = m.MarkExhausted(o.VSwitchID, until)
		lessons = append(lessons, Lesson{Kind: LessonExhausted, Key: o.VSwitchID, Until: until})
	}
	if o.GroupsRefused && (a.Kind == CreateENI || a.Kind == UpdateENI) {
		until, key := now.Add(DefaultRefusedFor), GroupsKey(a.SecurityGroups)
		m = m.MarkRefusedGroups(key, until)
		lessons = append(lessons, Lesson{Kind: LessonRefusedGroups, Key: key, Until: until})
	}
	if o.Definite && a.ClientToken != "" && (a.Kind == CreateENI || a.Kind == AssignIPs) {
		m = m.TokenFailed(a.ClientToken)
		lessons = append(lessons, Lesson{Kind: LessonTokenBurnt, Key: a.ClientToken})
	}
	return m, lessons
}

// askedPrefixes reports whether the action asks the cloud for IPv4
// prefixes (CreateENI or AssignIPs with IPv4PrefixCount). When such a
// request meets a vSwitch out of addresses, it is the /28s that ran out.
// A CreateENI that asked for addresses too is counted as asking for
// prefixes: the /28s are the likelier cause, and a fragmented mark stops
// only prefixes, where an exhausted one would stop single addresses too.
func askedPrefixes(a Action) bool {
	return (a.Kind == CreateENI || a.Kind == AssignIPs) && a.IPv4PrefixCount > 0
}

// GroupsKey is a set of security groups as a key: sorted, comma-joined
// (the key of Memory.RefusedGroups).
func GroupsKey(groups []string) string {
	_, key := sortedKey(groups)
	return key
}
