package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// The frames of the version 2 extension "values and observers"
// (docs/protocol.md), asked for with HELLO right after OPEN.
const (
	TypeHello        = 0x24
	TypeAcquireValue = 0x25
	TypeProclaim     = 0x26
	TypeObserve      = 0x27
	TypeUnobserve    = 0x28
	TypeLookup       = 0x29

	TypeFeatures   = 0x39
	TypeProclaimed = 0x3a
	TypeObserving  = 0x3b
	TypeUnobserved = 0x3c
	TypeLockState  = 0x3d
	TypeState      = 0x3e
)

// FeatureValues is the HELLO feature bit of values and observers.
const FeatureValues uint32 = 0x0000_0001

// MaxValueBytes is the longest claim value, in UTF-8 bytes (a protocol
// constant: a longer value is refused before connecting).
const MaxValueBytes = 1024

// CodeUnknownType is the ERROR a server without the extension answers
// HELLO with.
const CodeUnknownType = 0x13

func init() {
	claimCodeNames[0x0b] = "too many watches on this session"
	claimCodeNames[0x0c] = "server watch limit reached"
	claimCodeNames[0x26] = "value longer than 1024 bytes"
	claimCodeNames[0x27] = "value is not valid UTF-8"
}

// CheckValue returns why value cannot be a claim's value, or "" if it can:
// at most 1,024 bytes of valid UTF-8 (empty means none).
func CheckValue(value string) string {
	switch {
	case len(value) > MaxValueBytes:
		return fmt.Sprintf("value of %d bytes is above the maximum of %d bytes", len(value), MaxValueBytes)
	case !utf8.ValidString(value):
		return fmt.Sprintf("value %q is not valid UTF-8", value)
	}
	return ""
}

// AppendHello appends a HELLO asking for features to dst.
func AppendHello(dst []byte, features uint32) []byte {
	dst = append(dst, TypeHello)
	return binary.BigEndian.AppendUint32(dst, features)
}

// AppendAcquireValue appends an ACQUIRE_VALUE of a checked name and value.
func AppendAcquireValue(dst []byte, claim uint32, mode Mode, name, value string) []byte {
	dst = append(dst, TypeAcquireValue)
	dst = binary.BigEndian.AppendUint32(dst, claim)
	dst = append(dst, byte(mode), byte(len(name)))
	dst = append(dst, name...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(value)))
	return append(dst, value...)
}

// AppendProclaim appends a PROCLAIM of a checked value.
func AppendProclaim(dst []byte, claim uint32, value string) []byte {
	dst = append(dst, TypeProclaim)
	dst = binary.BigEndian.AppendUint32(dst, claim)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(value)))
	return append(dst, value...)
}

// AppendObserve appends an OBSERVE of a checked name.
func AppendObserve(dst []byte, watch uint32, name string) []byte {
	dst = append(dst, TypeObserve)
	dst = binary.BigEndian.AppendUint32(dst, watch)
	dst = append(dst, byte(len(name)))
	return append(dst, name...)
}

// AppendUnobserve appends an UNOBSERVE.
func AppendUnobserve(dst []byte, watch uint32) []byte {
	dst = append(dst, TypeUnobserve)
	return binary.BigEndian.AppendUint32(dst, watch)
}

// AppendLookup appends a LOOKUP of a checked name.
func AppendLookup(dst []byte, name string) []byte {
	dst = append(dst, TypeLookup, byte(len(name)))
	return append(dst, name...)
}

// StateEvent is the event byte of a state.
type StateEvent uint8

// The events of a state.
const (
	StateFree     StateEvent = 0x00
	StateHeld     StateEvent = 0x01
	StateGranted  StateEvent = 0x02
	StateValue    StateEvent = 0x03
	StateReleased StateEvent = 0x04
)

// String is the event's name in every monolock client and the driver
// protocol: "free", "held", "granted", "value", "released".
func (e StateEvent) String() string {
	switch e {
	case StateFree:
		return "free"
	case StateHeld:
		return "held"
	case StateGranted:
		return "granted"
	case StateValue:
		return "value"
	case StateReleased:
		return "released"
	}
	return fmt.Sprintf("StateEvent(0x%02x)", uint8(e))
}

// The flags of a state; other bits are ignored.
const (
	FlagInitial   = 0x01
	FlagCoalesced = 0x02
)

// ReleaseReason is the reason byte of a RELEASED state (0 otherwise).
type ReleaseReason uint8

// The reasons a claim ended, in a RELEASED state.
const (
	ReleaseNone          ReleaseReason = 0x00
	ReleaseByHolder      ReleaseReason = 0x01
	ReleaseExpired       ReleaseReason = 0x02
	ReleaseForced        ReleaseReason = 0x03
	ReleaseEndedByServer ReleaseReason = 0x04
)

// String is the reason's name: "released", "expired", "forced",
// "ended_by_server"; "" for none.
func (r ReleaseReason) String() string {
	switch r {
	case ReleaseNone:
		return ""
	case ReleaseByHolder:
		return "released"
	case ReleaseExpired:
		return "expired"
	case ReleaseForced:
		return "forced"
	case ReleaseEndedByServer:
		return "ended_by_server"
	}
	return fmt.Sprintf("ReleaseReason(0x%02x)", uint8(r))
}

// State is the state of a lock, in STATE and LOCK_STATE.
type State struct {
	Event   StateEvent
	Flags   uint8
	Token   uint64
	SinceMS uint64
	Reason  ReleaseReason
	Value   string
}

// Held is whether the lock is held in this state.
func (s State) Held() bool {
	return s.Event == StateHeld || s.Event == StateGranted || s.Event == StateValue
}

func (s State) String() string {
	text := fmt.Sprintf("%s token %d", s.Event, s.Token)
	if s.Flags&FlagInitial != 0 {
		text += " initial"
	}
	if s.Flags&FlagCoalesced != 0 {
		text += " coalesced"
	}
	if s.Reason != ReleaseNone {
		text += " reason " + s.Reason.String()
	}
	if s.Value != "" {
		text += fmt.Sprintf(" value %q", s.Value)
	}
	return text
}

// stateHead is the length of a state before its value.
const stateHead = 1 + 1 + 8 + 8 + 1 + 2

// BadFrameError is a frame of a known type whose content no server
// sends (an unknown state event or release reason).
type BadFrameError struct {
	msg string
}

func (e *BadFrameError) Error() string { return e.msg }

// decodeState reads a state at the start of buf: its length, 0 while
// incomplete.
func decodeState(buf []byte) (State, int, error) {
	if len(buf) < stateHead {
		return State{}, 0, nil
	}
	be := binary.BigEndian
	n := stateHead + int(be.Uint16(buf[stateHead-2:stateHead]))
	if len(buf) < n {
		return State{}, 0, nil
	}
	st := State{
		Event:   StateEvent(buf[0]),
		Flags:   buf[1],
		Token:   be.Uint64(buf[2:10]),
		SinceMS: be.Uint64(buf[10:18]),
		Reason:  ReleaseReason(buf[18]),
		Value:   text(buf[stateHead:n]),
	}
	if st.Event > StateReleased {
		return State{}, 0, &BadFrameError{msg: fmt.Sprintf("a state with the unknown event 0x%02x", uint8(st.Event))}
	}
	if st.Reason > ReleaseEndedByServer {
		return State{}, 0, &BadFrameError{msg: fmt.Sprintf("a state with the unknown release reason 0x%02x", uint8(st.Reason))}
	}
	return st, n, nil
}

// decodeExt decodes the server frames of the extension; ok is false for
// a type byte that is not one of them.
func decodeExt(buf []byte) (frame Frame2, n int, ok bool, err error) {
	be := binary.BigEndian
	switch buf[0] {
	case TypeFeatures:
		if len(buf) < 9 {
			return Frame2{}, 0, true, nil
		}
		return Frame2{Kind: Features, Features: be.Uint32(buf[1:5]), MaxWatches: be.Uint32(buf[5:9])}, 9, true, nil
	case TypeProclaimed, TypeObserving, TypeUnobserved:
		if len(buf) < 5 {
			return Frame2{}, 0, true, nil
		}
		id := be.Uint32(buf[1:5])
		switch buf[0] {
		case TypeProclaimed:
			return Frame2{Kind: Proclaimed, Claim: id}, 5, true, nil
		case TypeObserving:
			return Frame2{Kind: Observing, Watch: id}, 5, true, nil
		}
		return Frame2{Kind: Unobserved, Watch: id}, 5, true, nil
	case TypeLockState:
		st, m, err := decodeState(buf[1:])
		if err != nil || m == 0 {
			return Frame2{}, 0, true, err
		}
		return Frame2{Kind: LockState, State: st}, 1 + m, true, nil
	case TypeState:
		if len(buf) < 5 {
			return Frame2{}, 0, true, nil
		}
		st, m, err := decodeState(buf[5:])
		if err != nil || m == 0 {
			return Frame2{}, 0, true, err
		}
		return Frame2{Kind: State2, Watch: be.Uint32(buf[1:5]), State: st}, 5 + m, true, nil
	}
	return Frame2{}, 0, false, nil
}
