package ecssim

import (
	"encoding/base64"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// timeFormat is how the APIs render times.
const timeFormat = "2006-01-02T15:04:05Z"

// touchLocked records, before a mutation of ENI id, what reads keep showing
// during the stale-read window. The oldest unexpired record wins, so reads
// lag the whole burst of changes. Called with mu held.
func (s *Server) touchLocked(id string) {
	if s.run.StaleReads <= 0 {
		return
	}
	now := s.now()
	if rec, ok := s.stale[id]; ok && now.Before(rec.until) {
		return
	}
	var prev *ENIState
	if e := s.m.enis[id]; e != nil {
		prev = e.clone()
	}
	s.recordStaleLocked(id, prev, now)
}

// recordStaleLocked makes reads show ENI id as prev (nil: not list it)
// for Settings.StaleReads from now. It forgets the records expired, so
// that the map holds only those of the last window even when every read
// names its ENIs (viewENIsLocked then forgets none). Called with mu held.
func (s *Server) recordStaleLocked(id string, prev *ENIState, now time.Time) {
	for k, rec := range s.stale {
		if !now.Before(rec.until) {
			delete(s.stale, k)
		}
	}
	s.stale[id] = staleENI{prev: prev, until: now.Add(s.run.StaleReads)}
}

// viewENIsLocked returns the ENIs as reads see them, sorted by ID: each
// shadowed by its stale record while that lasts, by its state before the
// change (a record without one hides a new ENI). Given ids, it returns
// only the ENIs they name, each once; else given inst, only those on that
// instance; else given tags, those carrying one of them (the caller
// filters by all of them; a tag with no value is not indexed); else all.
// The cost follows the ENIs returned and the stale records (a few: those
// of the last Settings.StaleReads), not the account, except for all.
// Called with mu held.
func (s *Server) viewENIsLocked(ids []string, inst string, tags map[string]string) []*ENIState {
	now := s.now()
	var out []*ENIState
	if len(ids) > 0 {
		for _, id := range ids {
			if rec, ok := s.stale[id]; ok && now.Before(rec.until) {
				if rec.prev != nil {
					out = append(out, rec.prev)
				}
			} else if e := s.m.enis[id]; e != nil {
				out = append(out, e)
			}
		}
		sortByID(out)
		return slices.CompactFunc(out, func(a, b *ENIState) bool { return a.ID == b.ID })
	}
	for id, rec := range s.stale {
		if !now.Before(rec.until) {
			delete(s.stale, id)
			continue
		}
		// A record's state before the change may be on another instance
		// than the ENI is now (a detach done shows it attached still).
		if rec.prev != nil && (inst == "" || rec.prev.InstanceID == inst) {
			out = append(out, rec.prev)
		}
	}
	live := s.m.enis
	if inst != "" {
		live = s.m.byInstance[inst]
	} else {
		// The smallest set of one tag's ENIs: every match carries it.
		for k, v := range tags {
			if set := s.m.byTag[tagKey(k, v)]; v != "" && len(set) < len(live) {
				live = set
			}
		}
	}
	for id, e := range live {
		// Every record left is in force: it shadows its ENI.
		if _, shadowed := s.stale[id]; !shadowed {
			out = append(out, e)
		}
	}
	sortByID(out)
	return out
}

func sortByID(es []*ENIState) {
	slices.SortFunc(es, func(a, b *ENIState) int { return strings.Compare(a.ID, b.ID) })
}

func renderENI(e *ENIState) obj {
	ips := []obj{{"PrivateIpAddress": e.PrimaryIP.String(), "Primary": true}}
	for _, a := range e.IPv4 {
		ips = append(ips, obj{"PrivateIpAddress": a.String(), "Primary": false})
	}
	v6 := []obj{}
	for _, a := range e.IPv6 {
		v6 = append(v6, obj{"Ipv6Address": a.String()})
	}
	prefixes := []obj{}
	for _, q := range e.IPv4Prefixes {
		prefixes = append(prefixes, obj{"Ipv4Prefix": q.String()})
	}
	o := obj{
		"NetworkInterfaceId": e.ID, "Status": e.Status, "Type": e.Type, "MacAddress": e.MAC,
		"PrivateIpAddress": e.PrimaryIP.String(), "VpcId": e.VPCID, "VSwitchId": e.VSwitchID, "ZoneId": e.ZoneID,
		"InstanceId": e.InstanceID, "CreationTime": e.CreatedAt.UTC().Format(timeFormat),
		"NetworkInterfaceTrafficMode": e.TrafficMode, "Description": e.Description, "NetworkInterfaceName": "",
		"ResourceGroupId": "", "DeleteOnRelease": e.Type == "Primary" || e.DeleteOnRelease, "SourceDestCheck": false,
		"SecurityGroupIds": obj{"SecurityGroupId": orEmpty(e.SecurityGroups)},
		"PrivateIpSets":    obj{"PrivateIpSet": ips},
		"Ipv6Sets":         obj{"Ipv6Set": v6},
		"Ipv4PrefixSets":   obj{"Ipv4PrefixSet": prefixes},
		"Tags":             obj{"Tag": renderTags(e.Tags, "TagKey", "TagValue")},
		"Attachment":       obj{},
	}
	if e.InstanceID != "" {
		o["Attachment"] = obj{"InstanceId": e.InstanceID, "DeviceIndex": e.DeviceIndex, "NetworkCardIndex": 0, "TrunkNetworkInterfaceId": ""}
	}
	return o
}

func renderTags(t map[string]string, k, v string) []obj {
	keys := make([]string, 0, len(t))
	for key := range t {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	out := make([]obj, 0, len(keys))
	for _, key := range keys {
		out = append(out, obj{k: key, v: t[key]})
	}
	return out
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// page is one page of a listing.
type page struct {
	from, to   int
	nextToken  string
	pageNumber int
	pageSize   int
}

// paginate pages a listing of ids (sorted) by rule. With NextToken or
// MaxResults (where the listing takes them) it uses token paging: the
// token names the last ID returned, so concurrent changes neither repeat
// nor skip entries, and PageNumber/PageSize are ignored, as the API
// reference says of DescribeNetworkInterfaces and DescribeInstances.
// Otherwise PageNumber (1..) and PageSize (1..rule.maxPageSize).
func paginate(p url.Values, ids []string, rule pageRule) (page, error) {
	if rule.tokens && (p.Get("NextToken") != "" || p.Get("MaxResults") != "") {
		n, err := rule.maxResultsOf(p)
		if err != nil {
			return page{}, err
		}
		from := 0
		if t := p.Get("NextToken"); t != "" {
			b, err := base64.RawURLEncoding.DecodeString(t)
			if err != nil || len(b) == 0 {
				return page{}, apiErr("InvalidParameter", "The NextToken %q is not valid.", t)
			}
			from = sort.SearchStrings(ids, string(b))
			if from < len(ids) && ids[from] == string(b) {
				from++
			}
		}
		to := min(from+n, len(ids))
		pg := page{from: from, to: to, pageSize: n}
		if to < len(ids) {
			pg.nextToken = base64.RawURLEncoding.EncodeToString([]byte(ids[to-1]))
		}
		return pg, nil
	}
	num, err := intParam(p, "PageNumber", 1, 1, 1<<30)
	if err != nil {
		return page{}, err
	}
	size, err := intParam(p, "PageSize", rule.defPageSize, 1, rule.maxPageSize)
	if err != nil {
		return page{}, err
	}
	from := min((num-1)*size, len(ids))
	to := min(from+size, len(ids))
	return page{from: from, to: to, pageNumber: num, pageSize: size}, nil
}

func fmtTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func cloneValues(v url.Values) url.Values {
	c := make(url.Values, len(v))
	for k, vs := range v {
		c[k] = append([]string(nil), vs...)
	}
	return c
}
