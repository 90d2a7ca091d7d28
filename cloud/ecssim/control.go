package ecssim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// serveControl is the control API, on the ECS listener under /_sim/:
//
//	GET  /_sim/counters        action -> outcome -> count (JSON)
//	POST /_sim/reset-counters  zero the counters
//	GET  /_sim/state           the whole model (State, JSON)
//	POST /_sim/faults          a Fault (JSON): one-shot, or a rate
//	GET  /_sim/settings        the run-time Settings (JSON)
//	POST /_sim/settings        replace the run-time Settings (JSON)
//	POST /_sim/fragment        {"VSwitchID":"vsw-x"}: FragmentVSwitch; answers {"Addresses":n}
//	POST /_sim/defragment      {"VSwitchID":"vsw-x"}: DefragmentVSwitch; answers {"Addresses":n}
//	POST /_sim/release-instance {"InstanceID":"i-x"}: ReleaseInstance; answers {"Deleted":[...],"Kept":[...]}
//	POST /_sim/stop-instance   {"InstanceID":"i-x"}: StopInstance
//	POST /_sim/start-instance  {"InstanceID":"i-x"}: StartInstance
//	POST /_sim/tag-vswitch     {"VSwitchID":"vsw-x","Tags":{...}}: TagVSwitch (a value "" removes the key)
//
// Durations in the JSON bodies are nanoseconds (time.Duration). It is not
// authenticated: the simulator is for loopback use.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	var v any
	switch r.Method + " " + r.URL.Path {
	case "GET /_sim/counters":
		v = s.Counters()
	case "POST /_sim/reset-counters":
		s.ResetCounters()
		v = struct{}{}
	case "GET /_sim/state":
		v = s.Dump()
	case "POST /_sim/faults":
		var f Fault
		if err := decodeBody(r, &f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if f.Code == "" && f.Rate == 0 && f.Action != MetadataAction {
			http.Error(w, "fault: needs Code (one-shot) or Rate", http.StatusBadRequest)
			return
		}
		s.InjectFault(f)
		v = struct{}{}
	case "GET /_sim/settings":
		v = s.CurrentSettings()
	case "POST /_sim/settings":
		var st Settings
		if err := decodeBody(r, &st); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.SetSettings(st)
		v = struct{}{}
	case "POST /_sim/fragment", "POST /_sim/defragment":
		var req VSwitchRequest
		if err := decodeBody(r, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		do := s.FragmentVSwitch
		if r.URL.Path == "/_sim/defragment" {
			do = s.DefragmentVSwitch
		}
		n, err := do(req.VSwitchID)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		v = AddressCount{Addresses: n}
	case "POST /_sim/release-instance", "POST /_sim/stop-instance", "POST /_sim/start-instance":
		var req InstanceRequest
		if err := decodeBody(r, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var err error
		switch r.URL.Path {
		case "/_sim/release-instance":
			var rel Released
			rel.Deleted, rel.Kept, err = s.ReleaseInstance(req.InstanceID)
			v = rel
		case "/_sim/stop-instance":
			err, v = s.StopInstance(req.InstanceID), struct{}{}
		default:
			err, v = s.StartInstance(req.InstanceID), struct{}{}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
	case "POST /_sim/tag-vswitch":
		var req TagRequest
		if err := decodeBody(r, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.TagVSwitch(req.VSwitchID, req.Tags); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		v = struct{}{}
	default:
		http.Error(w, fmt.Sprintf("no control endpoint %s %s", r.Method, r.URL.Path), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		s.log.Debug("ecssim: control write", "err", err)
	}
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", r.URL.Path, err)
	}
	return nil
}

// VSwitchRequest is the body of POST /_sim/fragment and /_sim/defragment.
type VSwitchRequest struct {
	VSwitchID string
}

// AddressCount answers POST /_sim/fragment and /_sim/defragment: how many
// addresses were taken or released.
type AddressCount struct {
	Addresses int
}

// InstanceRequest is the body of POST /_sim/release-instance,
// /_sim/stop-instance and /_sim/start-instance.
type InstanceRequest struct {
	InstanceID string
}

// Released answers POST /_sim/release-instance: the ENIs deleted with the
// instance and those left Available.
type Released struct {
	Deleted, Kept []string
}

// TagRequest is the body of POST /_sim/tag-vswitch.
type TagRequest struct {
	VSwitchID string
	Tags      map[string]string
}
