package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Version2 is the protocol version byte of an OPEN (docs/protocol.md,
// "Protocol version 2").
const Version2 = 0x02

// Version 2 frame type bytes. OPEN shares 0x01 with the v1 ACQUIRE; the
// version byte tells them apart.
const (
	TypeOpen      = 0x01
	TypeAcquireV2 = 0x21
	TypeRelease   = 0x22
	TypePing      = 0x23

	TypeOpened    = 0x30
	TypeAcquired2 = 0x31
	TypeWaiting2  = 0x32
	TypeBusy      = 0x33
	TypeReleased  = 0x34
	TypePong      = 0x35
	TypeRefused   = 0x36
	TypeGranted   = 0x37
	TypeRevoked   = 0x38
)

// Codes of protocol v2 the client acts on.
const (
	CodeUnsupportedVersion = 0x10
	CodeIdleClosed         = 0x03
	CodeClaimRevoked       = 0x08
	CodeTooManyClaims      = 0x09
	CodeUnknownClaim       = 0x20
	CodeClaimNotAuthorized = 0x24
)

var claimCodeNames = map[uint8]string{
	0x08: "claim ended by an administrator",
	0x09: "too many claims on this session",
	0x20: "unknown claim id",
	0x21: "claim id already in use",
	0x22: "empty lock name",
	0x23: "lock name is not valid UTF-8",
	0x24: "not authorized for lock",
	0x25: "unknown ACQUIRE mode",
}

// IsClaimCode is whether code is one of REFUSED and REVOKED (their
// numbers differ from every session code).
func IsClaimCode(code uint8) bool {
	_, ok := claimCodeNames[code]
	return ok
}

// DescribeClaimCode formats a REFUSED or REVOKED code as
// `0x24 (not authorized for lock): detail`.
func DescribeClaimCode(code uint8, detail string) string {
	text := fmt.Sprintf("0x%02x", code)
	if name, ok := claimCodeNames[code]; ok {
		text += " (" + name + ")"
	}
	if detail != "" {
		text += ": " + detail
	}
	return text
}

func init() {
	codeNames[0x03] = "idle session closed"
	codeNames[0x19] = "frame out of state"
}

// Mode of a v2 ACQUIRE.
type Mode uint8

// The ACQUIRE modes.
const (
	ModeWait Mode = 0x00
	ModeTry  Mode = 0x01
)

// Ping is the whole PING frame.
var Ping = []byte{TypePing}

// AppendOpen appends an OPEN with a checked lease to dst.
func AppendOpen(dst []byte, leaseMS uint32) []byte {
	dst = append(dst, TypeOpen, Version2)
	return binary.BigEndian.AppendUint32(dst, leaseMS)
}

// AppendAcquireV2 appends a v2 ACQUIRE of a checked name to dst.
func AppendAcquireV2(dst []byte, claim uint32, mode Mode, name string) []byte {
	dst = append(dst, TypeAcquireV2)
	dst = binary.BigEndian.AppendUint32(dst, claim)
	dst = append(dst, byte(mode), byte(len(name)))
	return append(dst, name...)
}

// AppendRelease appends a RELEASE to dst.
func AppendRelease(dst []byte, claim uint32) []byte {
	dst = append(dst, TypeRelease)
	return binary.BigEndian.AppendUint32(dst, claim)
}

// Kind2 is the type of a v2 server frame.
type Kind2 uint8

// The server frames of protocol v2.
const (
	Opened Kind2 = iota + 1
	Acquired2
	Waiting2
	Busy
	Released
	Pong
	Refused
	Granted
	Revoked
	Error2
	// The frames of the extension (ext.go).
	Features
	Proclaimed
	Observing
	Unobserved
	LockState
	State2
)

// Frame2 is one frame from a v2 server.
type Frame2 struct {
	Kind Kind2
	// Session and MaxClaims of an OPENED.
	Session   uint64
	MaxClaims uint32
	// Claim of every claim frame; Token of ACQUIRED and GRANTED.
	Claim uint32
	Token uint64
	// Code and Reason of REFUSED, REVOKED and ERROR.
	Code   uint8
	Reason string
	// Features and MaxWatches of FEATURES.
	Features   uint32
	MaxWatches uint32
	// Watch of OBSERVING, UNOBSERVED and STATE.
	Watch uint32
	// State of STATE and LOCK_STATE.
	State State
}

func (f Frame2) String() string {
	switch f.Kind {
	case Opened:
		return fmt.Sprintf("OPENED(session %d, max_claims %d)", f.Session, f.MaxClaims)
	case Acquired2:
		return fmt.Sprintf("ACQUIRED(claim %d, token %d)", f.Claim, f.Token)
	case Waiting2:
		return fmt.Sprintf("WAITING(claim %d)", f.Claim)
	case Busy:
		return fmt.Sprintf("BUSY(claim %d)", f.Claim)
	case Released:
		return fmt.Sprintf("RELEASED(claim %d)", f.Claim)
	case Pong:
		return "PONG"
	case Refused:
		return fmt.Sprintf("REFUSED(claim %d, %s)", f.Claim, DescribeClaimCode(f.Code, f.Reason))
	case Granted:
		return fmt.Sprintf("GRANTED(claim %d, token %d)", f.Claim, f.Token)
	case Revoked:
		return fmt.Sprintf("REVOKED(claim %d, %s)", f.Claim, DescribeClaimCode(f.Code, f.Reason))
	case Error2:
		return "ERROR(" + DescribeCode(f.Code, f.Reason) + ")"
	case Features:
		return fmt.Sprintf("FEATURES(features 0x%08x, max_watches %d)", f.Features, f.MaxWatches)
	case Proclaimed:
		return fmt.Sprintf("PROCLAIMED(claim %d)", f.Claim)
	case Observing:
		return fmt.Sprintf("OBSERVING(watch %d)", f.Watch)
	case Unobserved:
		return fmt.Sprintf("UNOBSERVED(watch %d)", f.Watch)
	case LockState:
		return fmt.Sprintf("LOCK_STATE(%v)", f.State)
	case State2:
		return fmt.Sprintf("STATE(watch %d, %v)", f.Watch, f.State)
	}
	return "invalid frame"
}

func text(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) {
		s = string([]rune(s))
	}
	return s
}

// Decode2 returns the v2 frame at the start of buf and its length, or a
// length of 0 while the frame is incomplete. The error is an
// *UnknownTypeError, or a *BadFrameError for a state no server sends.
func Decode2(buf []byte) (Frame2, int, error) {
	if len(buf) == 0 {
		return Frame2{}, 0, nil
	}
	be := binary.BigEndian
	fixed := func(n int) bool { return len(buf) >= n }
	withReason := func(head int) (int, bool) {
		if len(buf) < head {
			return 0, false
		}
		n := head + int(buf[head-1])
		return n, len(buf) >= n
	}
	switch buf[0] {
	case TypeOpened:
		if !fixed(13) {
			return Frame2{}, 0, nil
		}
		return Frame2{Kind: Opened, Session: be.Uint64(buf[1:9]), MaxClaims: be.Uint32(buf[9:13])}, 13, nil
	case TypeAcquired2, TypeGranted:
		if !fixed(13) {
			return Frame2{}, 0, nil
		}
		kind := Acquired2
		if buf[0] == TypeGranted {
			kind = Granted
		}
		return Frame2{Kind: kind, Claim: be.Uint32(buf[1:5]), Token: be.Uint64(buf[5:13])}, 13, nil
	case TypeWaiting2, TypeBusy, TypeReleased:
		if !fixed(5) {
			return Frame2{}, 0, nil
		}
		kind := map[byte]Kind2{TypeWaiting2: Waiting2, TypeBusy: Busy, TypeReleased: Released}[buf[0]]
		return Frame2{Kind: kind, Claim: be.Uint32(buf[1:5])}, 5, nil
	case TypePong:
		return Frame2{Kind: Pong}, 1, nil
	case TypeRefused, TypeRevoked:
		n, ok := withReason(7)
		if !ok {
			return Frame2{}, 0, nil
		}
		kind := Refused
		if buf[0] == TypeRevoked {
			kind = Revoked
		}
		return Frame2{Kind: kind, Claim: be.Uint32(buf[1:5]), Code: buf[5], Reason: text(buf[7:n])}, n, nil
	case TypeError:
		n, ok := withReason(3)
		if !ok {
			return Frame2{}, 0, nil
		}
		return Frame2{Kind: Error2, Code: buf[1], Reason: text(buf[3:n])}, n, nil
	}
	if frame, n, ok, err := decodeExt(buf); ok {
		return frame, n, err
	}
	return Frame2{}, 0, &UnknownTypeError{Byte: buf[0]}
}
