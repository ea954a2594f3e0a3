package main

import (
	"strings"
	"testing"
)

// The commands of values and observers, through the client, against
// the real server; then the same asked of a client forced to v1.
func TestTheDriverSpeaksValuesAndObservers(t *testing.T) {
	addr, _ := startServer(t)
	d := newDriver()
	expect(t, do(t, d, `{"cmd":"open","address":"`+addr+`"}`), map[string]interface{}{"ok": true})
	a := do(t, d, `{"cmd":"lock","handle":"a","name":"v","lease_ms":1000,"value":"10.0.0.7:9000"}`)
	token := a["token"].(string)
	state := func(reply map[string]interface{}) map[string]interface{} {
		t.Helper()
		st, ok := reply["state"].(map[string]interface{})
		if !ok {
			t.Fatalf("no state in %v", reply)
		}
		return st
	}
	expect(t, state(do(t, d, `{"cmd":"holder","name":"v"}`)), map[string]interface{}{
		"held": true, "token": token, "value": "10.0.0.7:9000", "event": "held", "initial": false, "coalesced": false, "reason": nil})
	expect(t, state(do(t, d, `{"cmd":"observe","handle":"w","name":"v"}`)), map[string]interface{}{
		"held": true, "token": token, "value": "10.0.0.7:9000", "event": "held", "initial": true})
	expect(t, do(t, d, `{"cmd":"set_value","handle":"a","value":"10.0.0.7:9001"}`), map[string]interface{}{"ok": true})
	expect(t, state(do(t, d, `{"cmd":"next_state","handle":"w","timeout_ms":20000}`)), map[string]interface{}{
		"event": "value", "token": token, "value": "10.0.0.7:9001"})
	expect(t, do(t, d, `{"cmd":"next_state","handle":"w","timeout_ms":10}`), map[string]interface{}{"ok": true, "timeout": true})
	expect(t, do(t, d, `{"cmd":"release","handle":"a"}`), map[string]interface{}{"ok": true})
	expect(t, state(do(t, d, `{"cmd":"next_state","handle":"w","timeout_ms":20000}`)), map[string]interface{}{
		"event": "released", "held": false, "token": token, "value": "", "reason": "released"})
	expect(t, do(t, d, `{"cmd":"unobserve","handle":"w"}`), map[string]interface{}{"ok": true})
	expect(t, do(t, d, `{"cmd":"next_state","handle":"w","timeout_ms":10}`), map[string]interface{}{"kind": "unknown_handle"})

	// An election: started_leading and new_leader (in either order), then
	// resign: stopped_leading, the lock free again.
	expect(t, do(t, d, `{"cmd":"elect","handle":"e","name":"leader","lease_ms":1000,"value":"me"}`), map[string]interface{}{"ok": true})
	kinds := map[string]map[string]interface{}{}
	for i := 0; i < 2; i++ {
		event, _ := do(t, d, `{"cmd":"next_election_event","handle":"e","timeout_ms":20000}`)["event"].(map[string]interface{})
		kinds[event["kind"].(string)] = event
	}
	started, leader := kinds["started_leading"], kinds["new_leader"]
	if started == nil || leader == nil || started["token"] != leader["token"] || leader["value"] != "me" {
		t.Fatalf("election events %v", kinds)
	}
	expect(t, do(t, d, `{"cmd":"resign","handle":"e"}`), map[string]interface{}{"ok": true})
	event, _ := do(t, d, `{"cmd":"next_election_event","handle":"e","timeout_ms":20000}`)["event"].(map[string]interface{})
	if event["kind"] != "stopped_leading" {
		t.Fatalf("after resign: %v", event)
	}
	expect(t, do(t, d, `{"cmd":"next_election_event","handle":"e","timeout_ms":20000}`), map[string]interface{}{"ok": true, "timeout": true})
	expect(t, state(do(t, d, `{"cmd":"holder","name":"leader"}`)), map[string]interface{}{"held": false, "event": "free"})

	long := strings.Repeat("x", 1025)
	expect(t, do(t, d, `{"cmd":"lock","handle":"b","name":"v","lease_ms":1000,"value":"`+long+`"}`), map[string]interface{}{"kind": "invalid_argument"})

	expect(t, do(t, d, `{"cmd":"open","address":"`+addr+`","force_v1":true}`), map[string]interface{}{"ok": true})
	for _, line := range []string{
		`{"cmd":"lock","handle":"b","name":"v","lease_ms":1000,"value":"x"}`,
		`{"cmd":"observe","handle":"w","name":"v"}`,
		`{"cmd":"holder","name":"v"}`,
		`{"cmd":"elect","handle":"e","name":"v","lease_ms":1000,"value":"x"}`,
	} {
		reply := do(t, d, line)
		expect(t, reply, map[string]interface{}{"kind": "unsupported"})
		if failure := reply["error"].(map[string]interface{}); failure["temporary"] != false ||
			!strings.Contains(failure["message"].(string), "protocol version 1 has no lock values or observers") {
			t.Fatalf("%s: %v", line, reply)
		}
	}
	expect(t, do(t, d, `{"cmd":"exit"}`), map[string]interface{}{"ok": true})
}
