package desired

import (
	"fmt"
	"path"
	"reflect"
	"sort"
	"strings"
)

// overrideBodyProblems checks each override's config: a partial config that
// may not set apiVersion, kind or overrides.
func overrideBodyProblems(overrides []Override) []Problem {
	var ps []Problem
	for i, o := range overrides {
		base := fmt.Sprintf("overrides[%d]", i)
		ps = append(ps, selectorProblems(base+".match", o.Match)...)
		if len(o.Config) == 0 || string(o.Config) == "null" {
			ps = append(ps, Problem{Path: base + ".config", Message: "required: the settings this override changes"})
			continue
		}
		body, err := decodeGeneric(o.Config)
		if err != nil {
			ps = append(ps, Problem{Path: base + ".config", Message: err.Error()})
			continue
		}
		m, ok := body.(map[string]any)
		if !ok {
			ps = append(ps, Problem{Path: base + ".config", Message: fmt.Sprintf("must be a mapping of config fields (got %s)", describe(body))})
			continue
		}
		for _, k := range []string{"apiVersion", "kind", "overrides"} {
			if _, ok := m[k]; ok {
				ps = append(ps, Problem{Path: base + ".config." + k, Message: "not allowed in an override"})
				delete(m, k)
			}
		}
		var scratch Config
		d := &strictDecoder{}
		d.decode(base+".config", m, reflect.ValueOf(&scratch).Elem())
		ps = append(ps, d.problems...)
	}
	return ps
}

func selectorProblems(base string, s NodeSelector) []Problem {
	var ps []Problem
	for name, pats := range map[string][]string{"nodeNames": s.NodeNames, "zones": s.Zones, "instanceTypes": s.InstanceTypes} {
		for i, p := range pats {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				ps = append(ps, Problem{Path: fmt.Sprintf("%s.%s[%d]", base, name, i), Message: fmt.Sprintf("not a valid pattern (got %q)", p)})
			}
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Path < ps[j].Path })
	return ps
}

// Matches reports whether the selector matches a node with these facts.
// Every non-empty field must match; within a field any value matches, and
// values may be shell patterns ("ecs.g7.*"). A selector with labels never
// matches when the node's labels are not known.
func (s NodeSelector) Matches(f NodeFacts) bool {
	anyMatch := func(pats []string, v string) bool {
		if len(pats) == 0 {
			return true
		}
		for _, p := range pats {
			if ok, err := path.Match(p, v); err == nil && ok {
				return true
			}
		}
		return false
	}
	if !anyMatch(s.NodeNames, f.NodeName) || !anyMatch(s.Zones, f.Zone) || !anyMatch(s.InstanceTypes, f.InstanceType) {
		return false
	}
	for k, v := range s.Labels {
		if got, ok := f.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// mergeInto merges src into dst: mappings merge key by key, anything else
// replaces, and null deletes the key so its default applies again. origin
// records which file last set each path.
func mergeInto(dst, src map[string]any, prefix, file string, origin map[string]string) {
	for _, k := range sortedKeys(src) {
		v := src[k]
		p := joinPath(prefix, k)
		origin[p] = file
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]any)
		dm, dok := dst[k].(map[string]any)
		if sok && dok {
			mergeInto(dm, sm, p, file, origin)
			continue
		}
		if sok {
			cp := map[string]any{}
			mergeInto(cp, sm, p, file, origin)
			v = cp
		}
		dst[k] = v
	}
}

// lookupOrigin finds the file that set path or its nearest parent. Problem
// paths write map keys and list indexes in brackets; origins use dots.
func lookupOrigin(origin map[string]string, p string) string {
	for p != "" {
		if f, ok := origin[p]; ok {
			return f
		}
		if f, ok := origin[bracketsToDots(p)]; ok {
			return f
		}
		if strings.HasSuffix(p, "]") {
			p = p[:strings.LastIndex(p, "[")]
			continue
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			return ""
		}
		p = p[:i]
	}
	return ""
}

func bracketsToDots(p string) string {
	if !strings.HasSuffix(p, "]") {
		return p
	}
	i := strings.LastIndex(p, "[")
	return p[:i] + "." + p[i+1:len(p)-1]
}

// coveredBy reports whether a problem at path is already explained by one
// at the same path, a parent or a child.
func coveredBy(path string, ps []Problem) bool {
	for _, p := range ps {
		if p.Path == path || strings.HasPrefix(path, p.Path+".") || strings.HasPrefix(path, p.Path+"[") ||
			strings.HasPrefix(p.Path, path+".") || strings.HasPrefix(p.Path, path+"[") {
			return true
		}
	}
	return false
}
