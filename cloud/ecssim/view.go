package ecssim

import (
	"encoding/base64"
	"net/url"
	"sort"
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
	s.stale[id] = staleENI{prev: prev, until: now.Add(s.run.StaleReads)}
}

// viewENIsLocked returns the ENIs as reads see them (stale records
// applied), sorted by ID. Called with mu held.
func (s *Server) viewENIsLocked() []*ENIState {
	now := s.now()
	seen := map[string]bool{}
	var out []*ENIState
	for id, rec := range s.stale {
		if !now.Before(rec.until) {
			delete(s.stale, id)
			continue
		}
		seen[id] = true
		if rec.prev != nil {
			out = append(out, rec.prev)
		}
	}
	for id, e := range s.m.enis {
		if !seen[id] {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
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
