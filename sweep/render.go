package sweep

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// FormatVersion is the version of the JSON form (docs/deploy.md). It
// changes only when a field changes meaning or goes away.
const FormatVersion = 1

// Result is what executing one deletion did.
type Result struct {
	ENIID string `json:"eniID"`
	// Err is "" on success.
	Err string `json:"error,omitempty"`
}

// Render returns the plan as text in the style of `enid plan`: one line
// per deletion with its reason, the kept ENIs counted by reason (listed
// one by one with showKept), then a summary line; results, when given,
// say what execution did.
func (p Plan) Render(showKept bool, results []Result) string {
	var w strings.Builder
	w.WriteString("enid sweep: " + plural(len(p.Delete)+len(p.Keep), "ENI") + " with enid's tags (grace " + round(p.Grace))
	if p.StoppedOwners {
		w.WriteString(", stopped owners given up")
	}
	w.WriteString(")\n")
	if !p.Complete {
		w.WriteString("Sweep is INCOMPLETE: nothing is deleted until the observation is whole.\n")
	}
	for _, pr := range p.Problems {
		w.WriteString("! " + pr + "\n")
	}
	if len(p.Delete) == 0 {
		w.WriteString("No changes. No ENI is left by a dead node.\n")
	} else {
		w.WriteString("\n")
		for _, it := range p.Delete {
			w.WriteString("  - DeleteENI " + it.ENIID + "  # " + string(it.Code) + ": " + it.Text + "\n")
		}
	}
	if showKept && len(p.Keep) > 0 {
		w.WriteString("\n")
		for _, it := range p.Keep {
			w.WriteString("    keep " + it.ENIID + "  # " + string(it.Code) + ": " + it.Text + "\n")
		}
	}
	w.WriteString("\nSweep: " + plural(len(p.Delete), "ENI") + " to delete, " + strconv.Itoa(len(p.Keep)) + " kept")
	if len(p.Keep) > 0 {
		counts := map[Code]int{}
		for _, it := range p.Keep {
			counts[it.Code]++
		}
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, strconv.Itoa(counts[c])+" "+string(c))
		}
		w.WriteString(" (" + strings.Join(parts, ", ") + ")")
	}
	w.WriteString(".\n")
	if len(results) > 0 {
		failed := 0
		for _, r := range results {
			if r.Err != "" {
				failed++
				w.WriteString("! delete " + r.ENIID + ": " + r.Err + "\n")
			}
		}
		w.WriteString("Deleted " + strconv.Itoa(len(results)-failed) + " of " + plural(len(results), "ENI"))
		if failed > 0 {
			w.WriteString("; " + strconv.Itoa(failed) + " failed")
		}
		w.WriteString(".\n")
	}
	return w.String()
}

// JSON returns the plan (and the results, when given) in its stable JSON
// form: formatVersion, complete, problems, graceSeconds, stoppedOwners,
// delete and keep (items with eniID, owner, status, vSwitchID,
// ageSeconds, code, text) and results (eniID, error).
func (p Plan) JSON(results []Result) ([]byte, error) {
	type item struct {
		Item
		AgeSeconds int64 `json:"ageSeconds"`
	}
	conv := func(in []Item) []item {
		out := make([]item, 0, len(in))
		for _, it := range in {
			out = append(out, item{it, int64(it.Age.Seconds())})
		}
		return out
	}
	return json.MarshalIndent(struct {
		FormatVersion int      `json:"formatVersion"`
		Complete      bool     `json:"complete"`
		Problems      []string `json:"problems,omitempty"`
		GraceSeconds  int64    `json:"graceSeconds"`
		StoppedOwners bool     `json:"stoppedOwners"`
		Delete        []item   `json:"delete"`
		Keep          []item   `json:"keep"`
		Results       []Result `json:"results,omitempty"`
	}{FormatVersion, p.Complete, p.Problems, int64(p.Grace.Seconds()), p.StoppedOwners, conv(p.Delete), conv(p.Keep), results}, "", "  ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
