// Package wire is the byte format of monolock protocol v1 (docs/protocol.md):
// frames in and out, error codes, the limits on names and leases. No I/O:
// the session reads bytes and hands them to Decode, which takes whole frames
// only (one read may hold half a frame or three).
//
// A protocol v2 session adds its own file beside this one; nothing here
// knows about sockets or sessions.
package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Version1 is the protocol version byte of an ACQUIRE.
const Version1 = 0x01

// Frame type bytes.
const (
	TypeAcquire   = 0x01
	TypeHeartbeat = 0x02
	TypeWaiting   = 0x11
	TypeAcquired  = 0x12
	TypeError     = 0x13
)

// MaxNameBytes is the longest lock name, in UTF-8 bytes (a protocol constant).
const MaxNameBytes = 255

// MaxLeaseMS is the longest lease the wire carries, in milliseconds (u32).
const MaxLeaseMS = 0xFFFF_FFFF

// Heartbeat is the whole HEARTBEAT frame.
var Heartbeat = []byte{TypeHeartbeat}

// ERROR codes the client treats specially. Codes below ClientErrorCodes are
// server conditions (a new claim may succeed); from it up, client errors.
const (
	CodeShuttingDown  = 0x01
	CodeClosedByAdmin = 0x02
	CodeNotAuthorized = 0x18
	ClientErrorCodes  = 0x10
)

var codeNames = map[uint8]string{
	0x01: "server shutting down",
	0x02: "closed by administrator",
	0x10: "unsupported protocol version",
	0x11: "first message must be ACQUIRE",
	0x12: "duplicate ACQUIRE",
	0x13: "unknown message type",
	0x14: "empty lock name",
	0x15: "lock name too long",
	0x16: "lock name is not valid UTF-8",
	0x17: "lease must be positive",
	0x18: "not authorized for lock",
}

// DescribeCode formats an ERROR code as `0x02 (closed by administrator): detail`.
func DescribeCode(code uint8, detail string) string {
	text := fmt.Sprintf("0x%02x", code)
	if name, ok := codeNames[code]; ok {
		text += " (" + name + ")"
	}
	if detail != "" {
		text += ": " + detail
	}
	return text
}

// CheckName returns why name is not a valid lock name, or "" if it is:
// 1 to 255 bytes of valid UTF-8, never trimmed or normalised.
func CheckName(name string) string {
	switch {
	case name == "":
		return "lock name is empty"
	case len(name) > MaxNameBytes:
		return fmt.Sprintf("lock name is %d bytes long: at most %d UTF-8 bytes", len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Sprintf("lock name %q is not valid UTF-8", name)
	}
	return ""
}

// AppendAcquire appends an ACQUIRE of a checked name and lease to dst.
func AppendAcquire(dst []byte, name string, leaseMS uint32) []byte {
	dst = append(dst, TypeAcquire, Version1)
	dst = binary.BigEndian.AppendUint32(dst, leaseMS)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(name)))
	return append(dst, name...)
}

// Kind is the type of a server frame.
type Kind uint8

// The server frames of protocol v1.
const (
	Waiting Kind = iota + 1
	Acquired
	Error
)

// Frame is one frame from the server.
type Frame struct {
	Kind Kind
	// Token of an ACQUIRED.
	Token uint64
	// Code and Reason of an ERROR.
	Code   uint8
	Reason string
}

func (f Frame) String() string {
	switch f.Kind {
	case Waiting:
		return "WAITING"
	case Acquired:
		return fmt.Sprintf("ACQUIRED(%d)", f.Token)
	case Error:
		return "ERROR(" + DescribeCode(f.Code, f.Reason) + ")"
	}
	return "invalid frame"
}

// UnknownTypeError is a byte that starts no v1 server frame.
type UnknownTypeError struct {
	Byte byte
}

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("unexpected message type 0x%02x from server", e.Byte)
}

// Decode returns the frame at the start of buf and its length, or a length
// of 0 while the frame is incomplete. The error is an *UnknownTypeError.
func Decode(buf []byte) (Frame, int, error) {
	if len(buf) == 0 {
		return Frame{}, 0, nil
	}
	switch buf[0] {
	case TypeWaiting:
		return Frame{Kind: Waiting}, 1, nil
	case TypeAcquired:
		if len(buf) < 9 {
			return Frame{}, 0, nil
		}
		return Frame{Kind: Acquired, Token: binary.BigEndian.Uint64(buf[1:9])}, 9, nil
	case TypeError:
		if len(buf) < 3 {
			return Frame{}, 0, nil
		}
		n := 3 + int(buf[2])
		if len(buf) < n {
			return Frame{}, 0, nil
		}
		reason := string(buf[3:n])
		if !utf8.ValidString(reason) {
			reason = string([]rune(reason))
		}
		return Frame{Kind: Error, Code: buf[1], Reason: reason}, n, nil
	}
	return Frame{}, 0, &UnknownTypeError{Byte: buf[0]}
}
