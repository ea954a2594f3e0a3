package core

// The shared protocol vectors (clients/conformance/vectors, format in its
// README.md), replayed through this package's cores: Claim for version 1,
// Session for version 2. The replayer is the thinnest driver: it writes
// what the driver would write (with package wire's encoders), does the
// driver's duties (a heartbeat when due, a loss reason for each end) and
// compares every output and check with the vector.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"monolock.dev/go/monolock/internal/wire"
)

// vectorsEnv names another vectors directory (a checkout being written).
const vectorsEnv = "MONOLOCK_VECTORS"

// vectorOrigin is where a vector's instant 0 falls on the core's clock:
// not zero, so that no rule can lean on instants being small.
const vectorOrigin = 1000 * time.Second

// vectorsDir is MONOLOCK_VECTORS, else the repository's
// clients/conformance/vectors (tests run in this package's directory).
func vectorsDir() string {
	if dir := os.Getenv(vectorsEnv); dir != "" {
		return dir
	}
	return filepath.Join("..", "..", "..", "conformance", "vectors")
}

type vector struct {
	Name     string            `json:"name"`
	Protocol int               `json:"protocol"`
	LeaseMS  int64             `json:"lease_ms"`
	Steps    []json.RawMessage `json:"steps"`
}

// step is one step; fields a kind does not use are absent.
type step struct {
	Step  string          `json:"step"`
	Call  string          `json:"call"`
	Lock  string          `json:"lock"`
	Mode  string          `json:"mode"`
	Claim *uint32         `json:"claim"`
	Hex   string          `json:"hex"`
	To    *int64          `json:"to"`
	Held  *bool           `json:"held"`
	At    json.RawMessage `json:"at"`
	// The extension's fields (v2x vectors).
	Features *uint32 `json:"features"`
	Value    *string `json:"value"`
	Watch    *uint32 `json:"watch"`
}

// output is an output step or one the core produced, as the vector writes
// it (with its "step"), compared as JSON with sorted keys.
type output map[string]interface{}

func (o output) String() string {
	text, err := json.Marshal(map[string]interface{}(o))
	if err != nil {
		return fmt.Sprintf("%#v", map[string]interface{}(o))
	}
	return string(text)
}

func TestSharedVectors(t *testing.T) {
	dir := vectorsDir()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		abs, _ := filepath.Abs(dir)
		t.Fatalf("no protocol vectors (*.json) in %s: they are part of the repository (set %s to read another directory)", abs, vectorsEnv)
	}
	sort.Strings(paths)
	for _, path := range paths {
		path := path
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			replayVector(t, path)
		})
	}
}

func replayVector(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v vector
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if file := strings.TrimSuffix(filepath.Base(path), ".json"); v.Name != file {
		t.Fatalf("the vector in %s is named %q", filepath.Base(path), v.Name)
	}
	if v.Protocol != 1 && v.Protocol != 2 {
		t.Fatalf("protocol %d: a vector speaks version 1 or 2", v.Protocol)
	}
	if v.LeaseMS <= 0 || len(v.Steps) == 0 {
		t.Fatalf("lease_ms %d with %d steps: not a vector", v.LeaseMS, len(v.Steps))
	}
	r := &replayer{t: t, protocol: v.Protocol, lease: time.Duration(v.LeaseMS) * time.Millisecond, leaseMS: uint32(v.LeaseMS)}
	for i, raw := range v.Steps {
		r.index, r.raw = i, raw
		var s step
		if err := json.Unmarshal(raw, &s); err != nil {
			r.fail("%v", err)
		}
		out, err := outputOf(raw)
		if err != nil {
			r.fail("%v", err)
		}
		switch s.Step {
		case "call", "recv", "eof", "advance":
			r.noneLeft()
			r.input(s)
		case "send", "half_close":
			r.expect(&r.writes, out, "write")
		case "event":
			r.expect(&r.events, out, "event")
		case "belief", "deadline", "next_heartbeat":
			r.check(s)
		default:
			r.fail("unknown step kind %q", s.Step)
		}
	}
	r.index, r.raw = len(v.Steps), json.RawMessage(`"the end"`)
	r.noneLeft()
}

// outputOf is the step as an output, with its numbers kept as written.
func outputOf(raw json.RawMessage) (output, error) {
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	var out output
	if err := decoder.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// replayer drives one core through one vector.
type replayer struct {
	t        *testing.T
	index    int
	raw      json.RawMessage // the step, for messages
	protocol int
	lease    time.Duration
	leaseMS  uint32
	now      time.Duration
	// Outputs produced and not yet matched: writes (send, half_close) and
	// events, each in the order they arose.
	writes, events []output

	// Version 1: the claim, whether its owner let go (the write side is
	// shut, the server's EOF confirms), and whether the connection is over.
	claim     *Claim
	releasing bool
	over      bool

	// Version 2: the session, every claim id asked for, in order, and
	// whether its end was reported.
	session  *Session
	asked    []uint32
	reported bool
}

func (r *replayer) fail(format string, args ...interface{}) {
	r.t.Helper()
	r.t.Fatalf("step %d %s: %s", r.index, r.raw, fmt.Sprintf(format, args...))
}

func (r *replayer) at() time.Duration { return vectorOrigin + r.now }

func (r *replayer) write(frame []byte) {
	r.writes = append(r.writes, output{"step": "send", "hex": hex.EncodeToString(frame)})
}

func (r *replayer) event(fields output) {
	fields["step"] = "event"
	r.events = append(r.events, fields)
}

// expect matches the first pending output of its group with want.
func (r *replayer) expect(pending *[]output, want output, group string) {
	r.t.Helper()
	if len(*pending) == 0 {
		r.fail("expected %s %v, but the core produced none", group, want)
	}
	got := (*pending)[0]
	*pending = (*pending)[1:]
	gotText, wantText := got.String(), want.String()
	if gotText != wantText {
		r.fail("expected %s %s, the core produced %s", group, wantText, gotText)
	}
}

func (r *replayer) noneLeft() {
	r.t.Helper()
	if len(r.writes) > 0 || len(r.events) > 0 {
		r.fail("the core produced outputs the vector does not list: writes %v, events %v", r.writes, r.events)
	}
}

func (r *replayer) input(s step) {
	r.t.Helper()
	if s.Step == "advance" {
		if s.To == nil || *s.To < int64(r.now/time.Millisecond) {
			r.fail("advance needs a \"to\" at or after the current instant")
		}
		r.now = time.Duration(*s.To) * time.Millisecond
	}
	if r.protocol == 1 {
		r.inputV1(s)
	} else {
		r.inputV2(s)
	}
}

func (r *replayer) check(s step) {
	r.t.Helper()
	if r.protocol == 1 {
		r.checkV1(s)
	} else {
		r.checkV2(s)
	}
}

// checkInstant compares an "at" (an instant, or null for none).
func (r *replayer) checkInstant(what string, raw json.RawMessage, got time.Duration, has bool) {
	r.t.Helper()
	var want *int64
	if err := json.Unmarshal(raw, &want); err != nil || len(raw) == 0 {
		r.fail("%s: \"at\" must be an instant in ms or null", what)
	}
	switch {
	case want == nil && has:
		r.fail("%s: expected none, the core has %v", what, r.show(got))
	case want != nil && !has:
		r.fail("%s: expected %d ms, the core has none", what, *want)
	case want != nil && got != vectorOrigin+time.Duration(*want)*time.Millisecond:
		r.fail("%s: expected %d ms, the core has %v", what, *want, r.show(got))
	}
}

// show writes an instant of the core's clock as the vector would.
func (r *replayer) show(at time.Duration) string {
	return fmt.Sprintf("%v ms", float64(at-vectorOrigin)/float64(time.Millisecond))
}

func (r *replayer) bytesOf(s step) []byte {
	r.t.Helper()
	data, err := hex.DecodeString(s.Hex)
	if err != nil || len(data) == 0 {
		r.fail("recv: %q is not hex bytes", s.Hex)
	}
	return data
}

// Version 1: one Claim, driven as session_v1.go drives it.

func (r *replayer) inputV1(s step) {
	r.t.Helper()
	if s.Step == "advance" && r.claim == nil {
		return // no connection yet: only the clock moves
	}
	if s.Step != "call" && r.claim == nil {
		r.fail("%s before the acquire", s.Step)
	}
	if s.Step != "call" && s.Step != "advance" && r.over {
		r.fail("%s after the client gave the connection up", s.Step)
	}
	before := Status(0)
	if r.claim != nil {
		before = r.claim.Status()
	}
	switch s.Step {
	case "call":
		switch s.Call {
		case "acquire":
			if r.claim != nil || s.Mode != "wait" || s.Claim != nil {
				r.fail("a version 1 vector acquires once, in mode wait, without a claim id")
			}
			if why := wire.CheckName(s.Lock); why != "" {
				r.fail("%s", why)
			}
			r.claim = NewClaim(r.lease, r.at())
			r.write(wire.AppendAcquire(nil, s.Lock, r.leaseMS))
			return
		case "release":
			if r.claim == nil || r.releasing {
				r.fail("release without a claim")
			}
			// The driver shuts its write side down and reads until EOF.
			r.releasing = true
			r.writes = append(r.writes, output{"step": "half_close"})
			return
		}
		r.fail("call %q is not a version 1 call", s.Call)
	case "recv":
		r.claim.Receive(r.bytesOf(s), r.at())
	case "eof":
		if r.releasing && r.claim.Status() != StatusLost {
			// EOF after the half-close confirms the release.
			r.over = true
			r.event(output{"event": "released"})
			return
		}
		r.claim.Closed(nil)
	case "advance":
		if r.over || r.releasing {
			// After the release call the driver only waits for the EOF
			// (bounded by its I/O timeout): no heartbeat, no deadline.
			return
		}
		if r.claim.HeartbeatDue(r.at()) { // checks the deadline first
			r.claim.HeartbeatSent(r.at())
			r.write(wire.Heartbeat)
		}
	default:
		r.fail("unknown input %q", s.Step)
	}
	r.statusEvents(before)
}

// statusEvents reports what an input changed for the owner.
func (r *replayer) statusEvents(before Status) {
	after := r.claim.Status()
	if after == before {
		return
	}
	switch after {
	case StatusWaiting:
		r.event(output{"event": "waiting"})
	case StatusHeld:
		r.event(output{"event": "granted", "token": json.Number(fmt.Sprint(r.claim.Token()))})
	case StatusLost:
		r.over = true
		if r.releasing {
			return
		}
		r.event(output{"event": "lost", "reason": r.claim.Loss().Reason.String()})
	}
}

func (r *replayer) checkV1(s step) {
	r.t.Helper()
	if r.claim == nil {
		r.fail("%s before the acquire", s.Step)
	}
	switch s.Step {
	case "belief":
		if s.Held == nil {
			r.fail("belief needs \"held\"")
		}
		if !r.releasing {
			r.claim.Check(r.at())
		}
		held := r.claim.Status() == StatusHeld && !r.releasing
		if held != *s.Held {
			r.fail("belief: held %t, the core says %t (status %d, deadline %v)", *s.Held, held, r.claim.Status(), r.show(r.claim.Deadline()))
		}
	case "deadline":
		r.checkInstant("deadline", s.At, r.claim.Deadline(), true)
	case "next_heartbeat":
		next, ok := r.claim.NextHeartbeat()
		r.checkInstant("next_heartbeat", s.At, next, ok)
	}
}

// Version 2: one Session, driven as session_v2.go drives it.

func (r *replayer) inputV2(s step) {
	r.t.Helper()
	if s.Step == "advance" && r.session == nil {
		return // no session yet: only the clock moves
	}
	if s.Step != "call" && r.session == nil {
		r.fail("%s before the open", s.Step)
	}
	if r.session != nil && r.session.Ended() && s.Step != "advance" {
		r.fail("%s after the client gave the session up", s.Step)
	}
	switch s.Step {
	case "call":
		r.callV2(s)
	case "recv":
		for _, ev := range r.session.Receive(r.bytesOf(s), r.at()) {
			r.claimEvent(ev)
		}
		r.endedEvents()
	case "eof":
		r.session.Closed(nil)
		r.endedEvents()
	case "advance":
		if r.session.Ended() {
			return
		}
		if r.session.PingDue(r.at()) { // checks the deadline first
			r.session.PingSent(r.at())
			r.write(wire.Ping)
		}
		r.endedEvents()
	default:
		r.fail("unknown input %q", s.Step)
	}
}

func (r *replayer) callV2(s step) {
	r.t.Helper()
	if s.Call == "open" {
		if r.session != nil {
			r.fail("a second open")
		}
		r.session = NewSession(r.lease, r.at())
		r.write(wire.AppendOpen(nil, r.leaseMS))
		if s.Features != nil {
			r.session.HelloSent(*s.Features, r.at())
			r.write(wire.AppendHello(nil, *s.Features))
		}
		return
	}
	if r.session == nil {
		r.fail("call %q needs an open session", s.Call)
	}
	switch s.Call {
	case "observe", "unobserve", "lookup":
		r.callWatch(s)
		return
	}
	if s.Claim == nil {
		r.fail("call %q needs a claim id", s.Call)
	}
	id := *s.Claim
	switch s.Call {
	case "acquire":
		mode := map[string]wire.Mode{"wait": wire.ModeWait, "try": wire.ModeTry}
		m, ok := mode[s.Mode]
		if !ok || r.session.Knows(id) {
			r.fail("acquire of claim %d in mode %q", id, s.Mode)
		}
		if why := wire.CheckName(s.Lock); why != "" {
			r.fail("%s", why)
		}
		r.asked = append(r.asked, id)
		if s.Value != nil {
			if why := wire.CheckValue(*s.Value); why != "" {
				r.fail("%s", why)
			}
			r.write(wire.AppendAcquireValue(nil, id, m, s.Lock, *s.Value))
		} else {
			r.write(wire.AppendAcquireV2(nil, id, m, s.Lock))
		}
		r.session.AcquireSent(id, m, r.at())
	case "proclaim":
		if s.Value == nil {
			r.fail("proclaim needs a value")
		}
		if why := wire.CheckValue(*s.Value); why != "" {
			r.fail("%s", why)
		}
		r.write(wire.AppendProclaim(nil, id, *s.Value))
		r.session.ProclaimSent(id, r.at())
	case "release":
		if r.session.Release(id) == ReleaseWrite {
			r.sendRelease(id)
		}
	default:
		r.fail("call %q is not a version 2 call", s.Call)
	}
}

// callWatch: observe, unobserve and lookup.
func (r *replayer) callWatch(s step) {
	r.t.Helper()
	if s.Call == "lookup" {
		if why := wire.CheckName(s.Lock); why != "" {
			r.fail("%s", why)
		}
		r.write(wire.AppendLookup(nil, s.Lock))
		r.session.LookupSent(r.at())
		return
	}
	if s.Watch == nil {
		r.fail("call %q needs a watch id", s.Call)
	}
	id := *s.Watch
	if s.Call == "observe" {
		if why := wire.CheckName(s.Lock); why != "" || r.session.KnowsWatch(id) {
			r.fail("observe of watch %d: %s", id, why)
		}
		r.write(wire.AppendObserve(nil, id, s.Lock))
		r.session.ObserveSent(id, r.at())
		return
	}
	if r.session.Unobserve(id) == ReleaseWrite {
		r.sendUnobserve(id)
	}
}

func (r *replayer) sendUnobserve(id uint32) {
	r.write(wire.AppendUnobserve(nil, id))
	r.session.UnobserveSent(id, r.at())
}

func number(n uint64) json.Number { return json.Number(fmt.Sprint(n)) }

// stateFields is a state as the vectors write it in "state" and
// "lock_state" events (the state's own event under "state_event", as
// "event" names the event kind).
func stateFields(st wire.State) output {
	return output{"state_event": st.Event.String(), "token": number(st.Token), "since_ms": number(st.SinceMS), "value": st.Value}
}

func (r *replayer) sendRelease(id uint32) {
	r.write(wire.AppendRelease(nil, id))
	r.session.ReleaseSent(id, r.at())
}

func (r *replayer) claimEvent(ev ClaimEvent) {
	claim := json.Number(fmt.Sprint(ev.Claim))
	switch ev.Kind {
	case EventOpened:
		return
	case EventHeld:
		r.event(output{"event": "granted", "claim": claim, "token": json.Number(fmt.Sprint(ev.Token))})
	case EventWaiting:
		r.event(output{"event": "waiting", "claim": claim})
	case EventBusy:
		r.event(output{"event": "busy", "claim": claim})
	case EventRefused:
		r.event(output{"event": "refused", "claim": claim, "code": json.Number(fmt.Sprint(ev.Code))})
	case EventReleased:
		r.event(output{"event": "released", "claim": claim})
	case EventRevoked:
		r.event(output{"event": "lost", "claim": claim, "reason": ReasonForced.String()})
	case EventFeatures:
		r.event(output{"event": "features", "features": number(uint64(ev.Features)), "max_watches": number(uint64(ev.MaxWatches))})
	case EventUnsupported:
		r.event(output{"event": "unsupported"})
	case EventProclaimed:
		r.event(output{"event": "proclaimed", "claim": claim})
	case EventProclaimRefused:
		if ev.Gone {
			return // the REVOKED before it told the owner
		}
		r.event(output{"event": "refused", "claim": claim, "code": number(uint64(ev.Code))})
	case EventObserving:
		r.event(output{"event": "observing", "watch": number(uint64(ev.Watch))})
	case EventState:
		var reason interface{}
		if ev.State.Reason != wire.ReleaseNone {
			reason = ev.State.Reason.String()
		}
		out := stateFields(ev.State)
		out["event"], out["watch"], out["reason"] = "state", number(uint64(ev.Watch)), reason
		out["initial"], out["coalesced"] = ev.State.Flags&wire.FlagInitial != 0, ev.State.Flags&wire.FlagCoalesced != 0
		r.event(out)
	case EventUnobserved:
		r.event(output{"event": "unobserved", "watch": number(uint64(ev.Watch))})
	case EventWatchRefused:
		r.event(output{"event": "refused", "watch": number(uint64(ev.Watch)), "code": number(uint64(ev.Code))})
	case EventLockState:
		out := stateFields(ev.State)
		out["event"] = "lock_state"
		r.event(out)
	case EventLookupRefused:
		r.event(output{"event": "refused", "lookup": true, "code": number(uint64(ev.Code))})
	default:
		r.fail("unknown event %+v", ev)
	}
	if ev.Release {
		// The owner let go before the reply, which left the id in use:
		// the RELEASE goes out now.
		r.sendRelease(ev.Claim)
	}
	if ev.Unobserve {
		r.sendUnobserve(ev.Watch)
	}
}

// endedEvents: when the session has just ended, every claim still in use
// is lost with the session's reason, in ascending id.
// Then every live watch is lost, in ascending id.
func (r *replayer) endedEvents() {
	if r.session == nil || !r.session.Ended() || r.reported {
		return
	}
	r.reported = true
	ids := append([]uint32(nil), r.asked...)
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	reason := r.session.Loss().Reason.String()
	for _, id := range ids {
		if r.session.Knows(id) {
			r.event(output{"event": "lost", "claim": json.Number(fmt.Sprint(id)), "reason": reason})
		}
	}
	for _, id := range r.session.LiveWatches() {
		r.event(output{"event": "watch_lost", "watch": number(uint64(id)), "reason": reason})
	}
}

func (r *replayer) checkV2(s step) {
	r.t.Helper()
	if r.session == nil {
		r.fail("%s before the open", s.Step)
	}
	switch s.Step {
	case "belief":
		if s.Held == nil || s.Claim == nil {
			r.fail("belief needs \"held\" and \"claim\"")
		}
		r.session.Check(r.at())
		status, ok := r.session.Status(*s.Claim)
		held := ok && status == ClaimHeld && !r.session.Ended()
		if held != *s.Held {
			r.fail("belief of claim %d: held %t, the core says %t (status %d, known %t, ended %t)", *s.Claim, *s.Held, held, status, ok, r.session.Ended())
		}
	case "deadline":
		r.checkInstant("deadline", s.At, r.session.Deadline(), true)
	case "next_heartbeat":
		next, ok := r.session.NextPing()
		r.checkInstant("next_heartbeat", s.At, next, ok)
	}
}
