#!/usr/bin/env python3
"""Writes the v2x-*.json vectors (docs/protocol.md, "Version 2 extension:
values and observers") from the readable descriptions below.

    python3 clients/conformance/vectors/v2x.py           # rewrite the files
    python3 clients/conformance/vectors/v2x.py --check   # fail if a file differs

The JSON files are the artefact every client replays; this script only
spares a reader from counting bytes. Every frame is built by the small
encoders below, one per row of the protocol page's frame tables, and
check_frames.py (which shares no code with this file) decodes the written
files again.
"""

import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LEASE_MS = 2000

# Tokens and wall-clock instants the vectors use (the worked exchange's).
T0 = 0x0006B49D20000000  # 1887436800000000
SINCE0 = 1796300000000  # 0x000001a23bd2cb00

# --- frames: client to server -------------------------------------------


def u8(n):
    return struct.pack(">B", n)


def u16(n):
    return struct.pack(">H", n)


def u32(n):
    return struct.pack(">I", n)


def u64(n):
    return struct.pack(">Q", n)


def short_str(text):
    raw = text.encode()
    return u8(len(raw)) + raw


def long_str(text):
    raw = text.encode()
    return u16(len(raw)) + raw


def OPEN(lease_ms=LEASE_MS):
    return b"\x01\x02" + u32(lease_ms)


def HELLO(features=1):
    return b"\x24" + u32(features)


MODES = {"wait": 0, "try": 1}


def ACQUIRE(claim, mode, name):
    return b"\x21" + u32(claim) + u8(MODES[mode]) + short_str(name)


def ACQUIRE_VALUE(claim, mode, name, value):
    return b"\x25" + u32(claim) + u8(MODES[mode]) + short_str(name) + long_str(value)


def RELEASE(claim):
    return b"\x22" + u32(claim)


def PING():
    return b"\x23"


def PROCLAIM(claim, value):
    return b"\x26" + u32(claim) + long_str(value)


def OBSERVE(watch, name):
    return b"\x27" + u32(watch) + short_str(name)


def UNOBSERVE(watch):
    return b"\x28" + u32(watch)


def LOOKUP(name):
    return b"\x29" + short_str(name)


# --- frames: server to client -------------------------------------------


def OPENED(session=1, max_claims=1024):
    return b"\x30" + u64(session) + u32(max_claims)


def ACQUIRED(claim, token):
    return b"\x31" + u32(claim) + u64(token)


def WAITING(claim):
    return b"\x32" + u32(claim)


def RELEASED(claim):
    return b"\x34" + u32(claim)


def PONG():
    return b"\x35"


def REFUSED(frame_id, code, reason):
    return b"\x36" + u32(frame_id) + u8(code) + short_str(reason)


def GRANTED(claim, token):
    return b"\x37" + u32(claim) + u64(token)


def REVOKED(claim, code, reason):
    return b"\x38" + u32(claim) + u8(code) + short_str(reason)


def ERROR(code, reason):
    return b"\x13" + u8(code) + short_str(reason)


def FEATURES(features=1, max_watches=1024):
    return b"\x39" + u32(features) + u32(max_watches)


def PROCLAIMED(claim):
    return b"\x3a" + u32(claim)


def OBSERVING(watch):
    return b"\x3b" + u32(watch)


def UNOBSERVED(watch):
    return b"\x3c" + u32(watch)


STATE_EVENTS = {"free": 0, "held": 1, "granted": 2, "value": 3, "released": 4}
REASONS = {None: 0, "released": 1, "expired": 2, "forced": 3, "ended_by_server": 4}
INITIAL, COALESCED = 0x01, 0x02


def state_bytes(s):
    return (
        u8(STATE_EVENTS[s["state_event"]])
        + u8(s["flags"])
        + u64(s["token"])
        + u64(s["since_ms"])
        + u8(REASONS[s["reason"]])
        + long_str(s["value"])
    )


def LOCK_STATE(s):
    return b"\x3d" + state_bytes(s)


def STATE(watch, s):
    return b"\x3e" + u32(watch) + state_bytes(s)


def st(state_event, token=0, since_ms=0, value="", reason=None, flags=0):
    """A state as the server writes it (STATE or LOCK_STATE)."""
    return {
        "state_event": state_event,
        "flags": flags,
        "token": token,
        "since_ms": since_ms,
        "reason": reason,
        "value": value,
    }


# --- steps ---------------------------------------------------------------


def call(name, **fields):
    return {"step": "call", "call": name, **fields}


def send(*frames):
    return [{"step": "send", "hex": f.hex()} for f in frames]


def recv(*frames):
    return {"step": "recv", "hex": b"".join(frames).hex()}


def recv_hex(raw):
    return {"step": "recv", "hex": raw.hex()}


def advance(to):
    return {"step": "advance", "to": to}


def event(kind, **fields):
    return {"step": "event", "event": kind, **fields}


def state_event(watch, s):
    """The `state` event a pushed STATE gives its watch's owner."""
    return event(
        "state",
        watch=watch,
        state_event=s["state_event"],
        initial=bool(s["flags"] & INITIAL),
        coalesced=bool(s["flags"] & COALESCED),
        token=s["token"],
        since_ms=s["since_ms"],
        reason=s["reason"],
        value=s["value"],
    )


def lock_state_event(s):
    return event(
        "lock_state",
        state_event=s["state_event"],
        token=s["token"],
        since_ms=s["since_ms"],
        value=s["value"],
    )


def belief(claim, held):
    return {"step": "belief", "claim": claim, "held": held}


def deadline(at):
    return {"step": "deadline", "at": at}


def next_heartbeat(at):
    return {"step": "next_heartbeat", "at": at}


def opened_with_features():
    """OPEN and HELLO at 0, OPENED and FEATURES at 0 in one read."""
    return [
        call("open", features=1),
        *send(OPEN(), HELLO()),
        recv(OPENED(), FEATURES()),
        event("features", features=1, max_watches=1024),
    ]


def flat(*parts):
    out = []
    for part in parts:
        if isinstance(part, list):
            out.extend(part)
        else:
            out.append(part)
    return out


# --- the vectors ---------------------------------------------------------

VECTORS = []


def vector(name, description, *steps):
    VECTORS.append(
        {
            "name": name,
            "description": description,
            "protocol": 2,
            "lease_ms": LEASE_MS,
            "steps": flat(*steps),
        }
    )


vector(
    "v2x-hello-granted",
    "OPEN and HELLO (features 1) in one input, two frames. OPENED alone "
    "leaves HELLO in flight: no PING is scheduled. FEATURES grants bit 0 with "
    "max_watches 1024 (the features event) and, as a reply, confirms HELLO's "
    "send (0): deadline 1600; srtt 0 then 8 (round trips 0 and 40), so the "
    "first PING is due at 0 + 500 - 16 = 484 and its PONG moves the deadline "
    "to 484 + 1600.",
    call("open", features=1),
    send(OPEN(), HELLO()),
    deadline(1600),
    next_heartbeat(None),
    recv(OPENED()),
    next_heartbeat(None),
    deadline(1600),
    advance(40),
    recv(FEATURES()),
    event("features", features=1, max_watches=1024),
    deadline(1600),
    next_heartbeat(484),
    advance(483),
    next_heartbeat(484),
    advance(484),
    send(PING()),
    next_heartbeat(None),
    advance(492),
    recv(PONG()),
    deadline(2084),
    next_heartbeat(968),
)

UNKNOWN_0X24 = ERROR(0x13, "unknown message type: 0x24")

vector(
    "v2x-hello-unsupported",
    "A server that predates the extension: OPENED, then ERROR 0x13 (unknown "
    "message type: 0x24) as the answer to HELLO, in two reads. OPENED alone "
    "says nothing; the ERROR ends the session with the one event unsupported "
    "(no claim or watch existed yet, nothing is lost).",
    call("open", features=1),
    send(OPEN(), HELLO()),
    advance(10),
    recv(OPENED()),
    next_heartbeat(None),
    deadline(1600),
    advance(11),
    recv(UNKNOWN_0X24),
    event("unsupported"),
)

vector(
    "v2x-hello-unsupported-one-read",
    "OPENED and the ERROR 0x13 that answers HELLO arrive in one read: the "
    "one event unsupported, nothing else.",
    call("open", features=1),
    send(OPEN(), HELLO()),
    advance(10),
    recv(OPENED(), UNKNOWN_0X24),
    event("unsupported"),
)

vector(
    "v2x-acquire-value",
    "A claim with a value is written as ACQUIRE_VALUE (0x25, value_len u16 "
    "after the name); an empty value is still ACQUIRE_VALUE when the call "
    "carries the field (value_len 0); a call without it is a plain ACQUIRE. "
    "The replies are the ACQUIRE's and confirm the send like any reply.",
    opened_with_features(),
    advance(100),
    call("acquire", claim=1, lock="deploy", mode="wait", value="10.0.0.7:9000"),
    send(ACQUIRE_VALUE(1, "wait", "deploy", "10.0.0.7:9000")),
    next_heartbeat(None),
    recv(ACQUIRED(1, T0)),
    event("granted", claim=1, token=T0),
    belief(1, True),
    deadline(1700),
    next_heartbeat(600),
    advance(200),
    call("acquire", claim=2, lock="backup", mode="try", value=""),
    send(ACQUIRE_VALUE(2, "try", "backup", "")),
    recv(ACQUIRED(2, T0 + 1)),
    event("granted", claim=2, token=T0 + 1),
    belief(2, True),
    deadline(1800),
    advance(300),
    call("acquire", claim=3, lock="deploy", mode="wait"),
    send(ACQUIRE(3, "wait", "deploy")),
    recv(WAITING(3)),
    event("waiting", claim=3),
    belief(3, False),
    deadline(1900),
    next_heartbeat(800),
)

vector(
    "v2x-proclaim",
    "PROCLAIM replaces the value of a held claim (and of a waiting one); "
    "PROCLAIMED is its reply (the proclaimed event) and confirms its send "
    "like any reply: the deadline moves to the PROCLAIM's send + 1600, and "
    "the next PING is counted from it. An empty value is PROCLAIM with "
    "value_len 0. The claim stays held throughout.",
    opened_with_features(),
    advance(100),
    call("acquire", claim=1, lock="deploy", mode="wait", value="10.0.0.7:9000"),
    send(ACQUIRE_VALUE(1, "wait", "deploy", "10.0.0.7:9000")),
    recv(ACQUIRED(1, T0)),
    event("granted", claim=1, token=T0),
    deadline(1700),
    next_heartbeat(600),
    advance(300),
    call("proclaim", claim=1, value="10.0.0.7:9001"),
    send(PROCLAIM(1, "10.0.0.7:9001")),
    next_heartbeat(None),
    belief(1, True),
    deadline(1700),
    recv(PROCLAIMED(1)),
    event("proclaimed", claim=1),
    belief(1, True),
    deadline(1900),
    next_heartbeat(800),
    advance(500),
    call("proclaim", claim=1, value=""),
    send(PROCLAIM(1, "")),
    recv(PROCLAIMED(1)),
    event("proclaimed", claim=1),
    deadline(2100),
    call("acquire", claim=2, lock="deploy", mode="wait", value="a"),
    send(ACQUIRE_VALUE(2, "wait", "deploy", "a")),
    recv(WAITING(2)),
    event("waiting", claim=2),
    call("proclaim", claim=2, value="b"),
    send(PROCLAIM(2, "b")),
    recv(PROCLAIMED(2)),
    event("proclaimed", claim=2),
    belief(1, True),
    belief(2, False),
    deadline(2100),
    next_heartbeat(1000),
)

vector(
    "v2x-value-refused",
    "ACQUIRE_VALUE answered REFUSED 0x26 (value too long) and REFUSED 0x27 "
    "(value not UTF-8): the refused event with the code on the wire (38, "
    "39), the id free, the session alive, the reply confirming its send. "
    "(A client checks the value before sending it; these replies pin how it "
    "reports a server that refuses one all the same.)",
    opened_with_features(),
    advance(100),
    call("acquire", claim=1, lock="deploy", mode="wait", value="10.0.0.7:9000"),
    send(ACQUIRE_VALUE(1, "wait", "deploy", "10.0.0.7:9000")),
    recv(REFUSED(1, 0x26, "value longer than 1024 bytes")),
    event("refused", claim=1, code=0x26),
    belief(1, False),
    deadline(1700),
    next_heartbeat(600),
    advance(200),
    call("acquire", claim=2, lock="deploy", mode="try", value="10.0.0.7:9000"),
    send(ACQUIRE_VALUE(2, "try", "deploy", "10.0.0.7:9000")),
    recv(REFUSED(2, 0x27, "value is not valid UTF-8")),
    event("refused", claim=2, code=0x27),
    belief(2, False),
    deadline(1800),
    next_heartbeat(700),
)

vector(
    "v2x-proclaim-refused",
    "PROCLAIM of a held claim answered REFUSED 0x26: the refused event for "
    "the claim with code 38, and the claim stays as it was, held (a refused "
    "PROCLAIM changes nothing). Then a REVOKED crosses a PROCLAIM: the "
    "REVOKED ends the claim (lost, forced) and the PROCLAIM's reply, REFUSED "
    "0x20, is nothing for anyone but confirms its send.",
    opened_with_features(),
    advance(100),
    call("acquire", claim=1, lock="deploy", mode="wait", value="10.0.0.7:9000"),
    send(ACQUIRE_VALUE(1, "wait", "deploy", "10.0.0.7:9000")),
    recv(ACQUIRED(1, T0)),
    event("granted", claim=1, token=T0),
    advance(200),
    call("proclaim", claim=1, value="10.0.0.7:9001"),
    send(PROCLAIM(1, "10.0.0.7:9001")),
    recv(REFUSED(1, 0x26, "value longer than 1024 bytes")),
    event("refused", claim=1, code=0x26),
    belief(1, True),
    deadline(1800),
    next_heartbeat(700),
    advance(300),
    call("proclaim", claim=1, value="10.0.0.7:9002"),
    send(PROCLAIM(1, "10.0.0.7:9002")),
    recv(REVOKED(1, 0x08, "force-release")),
    event("lost", claim=1, reason="forced"),
    belief(1, False),
    deadline(1800),
    recv(REFUSED(1, 0x20, "unknown claim id: 1")),
    deadline(1900),
    next_heartbeat(800),
)

HELD_T0 = st("held", T0, SINCE0, "10.0.0.7:9000", flags=INITIAL)
FREE_UNKNOWN = st("free", 0, 0, flags=INITIAL)
FREE_KNOWN = st("free", T0 - 7, SINCE0 - 60000, flags=INITIAL)

vector(
    "v2x-observe-initial",
    "OBSERVE is answered OBSERVING, and the INITIAL STATE follows, here in the "
    "same read: HELD (token, since, value) for a held lock, FREE with token 0 "
    "and since 0 for a lock the server knows nothing of, FREE with the last "
    "holder's token and the instant it became free for one it does. "
    "OBSERVING confirms its OBSERVE's send; the STATE confirms nothing.",
    opened_with_features(),
    advance(100),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    next_heartbeat(None),
    recv(OBSERVING(1), STATE(1, HELD_T0)),
    event("observing", watch=1),
    state_event(1, HELD_T0),
    deadline(1700),
    next_heartbeat(600),
    advance(200),
    call("observe", watch=2, lock="backup"),
    send(OBSERVE(2, "backup")),
    recv(OBSERVING(2), STATE(2, FREE_UNKNOWN)),
    event("observing", watch=2),
    state_event(2, FREE_UNKNOWN),
    advance(300),
    call("observe", watch=3, lock="import"),
    send(OBSERVE(3, "import")),
    recv(OBSERVING(3)),
    event("observing", watch=3),
    deadline(1900),
    recv(STATE(3, FREE_KNOWN)),
    state_event(3, FREE_KNOWN),
    deadline(1900),
    next_heartbeat(800),
)

S1 = SINCE0 + 1500
S2 = SINCE0 + 4000
S3 = SINCE0 + 4100
S4 = SINCE0 + 6000
S5 = SINCE0 + 6100
S6 = SINCE0 + 9000
VALUE_T0 = st("value", T0, SINCE0, "10.0.0.7:9001")
RELEASED_T0 = st("released", T0, S1, reason="released")
GRANTED_T1 = st("granted", T0 + 1, S1, "10.0.0.8:9000")
RELEASED_T1 = st("released", T0 + 1, S2, reason="expired")
GRANTED_T2 = st("granted", T0 + 2, S3, "")
VALUE_T2 = st("value", T0 + 2, S3, "10.0.0.9:9000")
RELEASED_T2 = st("released", T0 + 2, S4, reason="forced")
GRANTED_T3 = st("granted", T0 + 3, S5, "{\"addr\":\"10.0.0.10:9000\"}")
RELEASED_T3 = st("released", T0 + 3, S6, reason="ended_by_server")

vector(
    "v2x-observe-changes",
    "One watch told every change in token order: VALUE (the holder replaced "
    "its value), a hand-on as RELEASED (reason released) then GRANTED in one "
    "read, RELEASED for each other reason (expired, forced, ended_by_server), "
    "a GRANTED with an empty value then its VALUE. Each push is one state "
    "event, fields as on the wire (reason null except for released); none "
    "moves the deadline or the next PING.",
    opened_with_features(),
    advance(100),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv(OBSERVING(1), STATE(1, HELD_T0)),
    event("observing", watch=1),
    state_event(1, HELD_T0),
    advance(200),
    recv(STATE(1, VALUE_T0)),
    state_event(1, VALUE_T0),
    advance(300),
    recv(STATE(1, RELEASED_T0), STATE(1, GRANTED_T1)),
    state_event(1, RELEASED_T0),
    state_event(1, GRANTED_T1),
    advance(400),
    recv(STATE(1, RELEASED_T1)),
    state_event(1, RELEASED_T1),
    recv(STATE(1, GRANTED_T2)),
    state_event(1, GRANTED_T2),
    recv(STATE(1, VALUE_T2), STATE(1, RELEASED_T2)),
    state_event(1, VALUE_T2),
    state_event(1, RELEASED_T2),
    advance(500),
    recv(STATE(1, GRANTED_T3), STATE(1, RELEASED_T3)),
    state_event(1, GRANTED_T3),
    state_event(1, RELEASED_T3),
    deadline(1700),
    next_heartbeat(600),
    advance(600),
    send(PING()),
    recv(PONG()),
    deadline(2200),
    next_heartbeat(1100),
)

COAL_HELD_T5 = st("held", T0 + 5, SINCE0 + 8000, "10.0.0.9:9000", flags=COALESCED)
RELEASED_T5 = st("released", T0 + 5, SINCE0 + 9000, reason="released")
COAL_FREE_T6 = st("free", T0 + 6, SINCE0 + 9500, flags=COALESCED | 0x80)
GRANTED_T7 = st("granted", T0 + 7, SINCE0 + 9600, "10.0.0.7:9000")

vector(
    "v2x-observe-coalesced",
    "A slow reader: after the INITIAL HELD (token ..00), a COALESCED push says "
    "the lock is HELD by token ..05 now (the changes between were dropped): "
    "a state event with coalesced true, initial false. Changes then go on "
    "(RELEASED ..05); a COALESCED FREE names the last holder's token ..06, "
    "with an unknown flag bit (0x80) set that a client ignores; then GRANTED "
    "..07 as usual.",
    opened_with_features(),
    advance(100),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv(OBSERVING(1), STATE(1, HELD_T0)),
    event("observing", watch=1),
    state_event(1, HELD_T0),
    advance(200),
    recv(STATE(1, COAL_HELD_T5)),
    state_event(1, COAL_HELD_T5),
    recv(STATE(1, RELEASED_T5), STATE(1, COAL_FREE_T6), STATE(1, GRANTED_T7)),
    state_event(1, RELEASED_T5),
    state_event(1, COAL_FREE_T6),
    state_event(1, GRANTED_T7),
    deadline(1700),
    next_heartbeat(600),
)

HELD_T5_INITIAL = st("held", T0 + 5, SINCE0, "10.0.0.7:9000", flags=INITIAL)
RELEASED_T5_A = st("released", T0 + 5, S1, reason="released")
GRANTED_T4 = st("granted", T0 + 4, S1, "10.0.0.8:9000")

vector(
    "v2x-state-token-back",
    "Watch 1 is told RELEASED ..05 (a state event), then, in the same read, "
    "GRANTED ..04: a token below the watch's last one, a protocol violation. "
    "The session ends: the claim is lost (protocol), then every live watch "
    "ends, watch_lost (protocol) in ascending watch id. Nothing is sent.",
    opened_with_features(),
    advance(100),
    call("acquire", claim=1, lock="backup", mode="wait"),
    send(ACQUIRE(1, "wait", "backup")),
    recv(ACQUIRED(1, T0 + 3)),
    event("granted", claim=1, token=T0 + 3),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv(OBSERVING(1), STATE(1, HELD_T5_INITIAL)),
    event("observing", watch=1),
    state_event(1, HELD_T5_INITIAL),
    call("observe", watch=2, lock="import"),
    send(OBSERVE(2, "import")),
    recv(OBSERVING(2), STATE(2, FREE_UNKNOWN)),
    event("observing", watch=2),
    state_event(2, FREE_UNKNOWN),
    advance(200),
    recv(STATE(1, RELEASED_T5_A), STATE(1, GRANTED_T4)),
    state_event(1, RELEASED_T5_A),
    event("lost", claim=1, reason="protocol"),
    event("watch_lost", watch=1, reason="protocol"),
    event("watch_lost", watch=2, reason="protocol"),
    belief(1, False),
)

vector(
    "v2x-state-after-unobserved",
    "Watch 1 is unobserved (UNOBSERVED read: the unobserved event, the id "
    "free again); a STATE for it afterwards names a watch not in use, a "
    "protocol violation: the claim is lost (protocol) and the live watch 2 "
    "ends (watch_lost, protocol).",
    opened_with_features(),
    advance(100),
    call("acquire", claim=1, lock="backup", mode="wait"),
    send(ACQUIRE(1, "wait", "backup")),
    recv(ACQUIRED(1, T0)),
    event("granted", claim=1, token=T0),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv(OBSERVING(1), STATE(1, FREE_UNKNOWN)),
    event("observing", watch=1),
    state_event(1, FREE_UNKNOWN),
    call("observe", watch=2, lock="import"),
    send(OBSERVE(2, "import")),
    recv(OBSERVING(2), STATE(2, FREE_UNKNOWN)),
    event("observing", watch=2),
    state_event(2, FREE_UNKNOWN),
    advance(200),
    call("unobserve", watch=1),
    send(UNOBSERVE(1)),
    recv(UNOBSERVED(1)),
    event("unobserved", watch=1),
    deadline(1800),
    advance(300),
    recv(STATE(1, st("granted", T0 + 1, S1, "10.0.0.8:9000"))),
    event("lost", claim=1, reason="protocol"),
    event("watch_lost", watch=2, reason="protocol"),
)

vector(
    "v2x-state-unknown-watch",
    "A STATE for watch 7, which was never observed (watch 1 is the only one "
    "in use): a protocol violation; the live watch ends with watch_lost "
    "(protocol).",
    opened_with_features(),
    advance(100),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv(OBSERVING(1), STATE(1, HELD_T0)),
    event("observing", watch=1),
    state_event(1, HELD_T0),
    advance(200),
    recv(STATE(7, st("granted", T0 + 1, S1, "10.0.0.8:9000"))),
    event("watch_lost", watch=1, reason="protocol"),
)

vector(
    "v2x-unobserve-pushes-dropped",
    "UNOBSERVE written at 200; two STATE pushes of that watch arrive before "
    "UNOBSERVED (210): no event for either. UNOBSERVED (220) gives the "
    "unobserved event and confirms the UNOBSERVE's send: deadline 1800; srtt "
    "0.2 x 20 = 4, so the next PING is due at 200 + 500 - 8 = 692.",
    opened_with_features(),
    advance(100),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv(OBSERVING(1), STATE(1, HELD_T0)),
    event("observing", watch=1),
    state_event(1, HELD_T0),
    advance(200),
    call("unobserve", watch=1),
    send(UNOBSERVE(1)),
    next_heartbeat(None),
    advance(210),
    recv(STATE(1, RELEASED_T0), STATE(1, GRANTED_T1)),
    deadline(1700),
    next_heartbeat(None),
    advance(220),
    recv(UNOBSERVED(1)),
    event("unobserved", watch=1),
    deadline(1800),
    next_heartbeat(692),
)

GRANTED_T1_B = st("granted", T0 + 1, S1, "10.0.0.8:9000")
VALUE_T1_B = st("value", T0 + 1, S1, "10.0.0.8:9001")

vector(
    "v2x-state-confirms-nothing",
    "A claim held and a watch, both answered at 100 (deadline 1700); the "
    "PING at 600 is never answered. STATE pushes at 700 and 1699 are state "
    "events but confirm nothing: the deadline stays 1700 and no second PING "
    "is scheduled. At 1700 the session is given up: the claim is lost "
    "(expired), then the watch ends (watch_lost, expired).",
    opened_with_features(),
    advance(100),
    call("acquire", claim=1, lock="backup", mode="wait"),
    send(ACQUIRE(1, "wait", "backup")),
    recv(ACQUIRED(1, T0)),
    event("granted", claim=1, token=T0),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv(OBSERVING(1), STATE(1, FREE_UNKNOWN)),
    event("observing", watch=1),
    state_event(1, FREE_UNKNOWN),
    deadline(1700),
    next_heartbeat(600),
    advance(600),
    send(PING()),
    advance(700),
    recv(STATE(1, GRANTED_T1_B)),
    state_event(1, GRANTED_T1_B),
    deadline(1700),
    next_heartbeat(None),
    advance(1699),
    recv(STATE(1, VALUE_T1_B)),
    state_event(1, VALUE_T1_B),
    belief(1, True),
    deadline(1700),
    next_heartbeat(None),
    advance(1700),
    event("lost", claim=1, reason="expired"),
    event("watch_lost", watch=1, reason="expired"),
    belief(1, False),
)

OWN_HELD = st("held", T0, SINCE0, "10.0.0.7:9000", flags=INITIAL)

vector(
    "v2x-session-end-claim-and-watches",
    "A claim (held, with a value) and two watches (one of the claim's own "
    "lock, one of another, claim and watch ids both starting at 1) when the "
    "server closes the connection: the claim is lost (connection), then each "
    "watch ends, watch_lost (connection), watch 1 then watch 2.",
    opened_with_features(),
    advance(100),
    call("acquire", claim=1, lock="deploy", mode="wait", value="10.0.0.7:9000"),
    send(ACQUIRE_VALUE(1, "wait", "deploy", "10.0.0.7:9000")),
    recv(ACQUIRED(1, T0)),
    event("granted", claim=1, token=T0),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    call("observe", watch=2, lock="backup"),
    send(OBSERVE(2, "backup")),
    recv(OBSERVING(1), STATE(1, OWN_HELD), OBSERVING(2), STATE(2, FREE_UNKNOWN)),
    event("observing", watch=1),
    state_event(1, OWN_HELD),
    event("observing", watch=2),
    state_event(2, FREE_UNKNOWN),
    advance(300),
    {"step": "eof"},
    event("lost", claim=1, reason="connection"),
    event("watch_lost", watch=1, reason="connection"),
    event("watch_lost", watch=2, reason="connection"),
    belief(1, False),
)

LOOKED_HELD = st("held", T0 + 1, S1, "10.0.0.8:9000")
LOOKED_FREE = st("free", 0, 0)

vector(
    "v2x-lookup",
    "Two LOOKUPs written one after the other, answered in order: LOCK_STATE "
    "HELD (token, since, value) then LOCK_STATE FREE (token 0, since 0): one "
    "lock_state event each. Each reply confirms its LOOKUP's send (round "
    "trips 100 and 50: srtt 20 then 26, the next PING at 150 + 500 - 52).",
    opened_with_features(),
    advance(100),
    call("lookup", lock="deploy"),
    send(LOOKUP("deploy")),
    advance(150),
    call("lookup", lock="backup"),
    send(LOOKUP("backup")),
    next_heartbeat(None),
    advance(200),
    recv(LOCK_STATE(LOOKED_HELD)),
    lock_state_event(LOOKED_HELD),
    deadline(1700),
    next_heartbeat(None),
    recv(LOCK_STATE(LOOKED_FREE)),
    lock_state_event(LOOKED_FREE),
    deadline(1750),
    next_heartbeat(598),
)

vector(
    "v2x-refused-observe-lookup",
    "OBSERVE answered REFUSED 0x0b (too many watches on this session) naming "
    "watch 1: the refused event carries watch, not claim; the id is free and "
    "the session lives. LOOKUP answered REFUSED 0x24 (not authorized) naming "
    "id 0: the refused event says lookup true. The next OBSERVE (watch 2) is "
    "answered as usual.",
    opened_with_features(),
    advance(100),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv(REFUSED(1, 0x0B, "too many watches on this session")),
    event("refused", watch=1, code=0x0B),
    deadline(1700),
    advance(200),
    call("lookup", lock="secret"),
    send(LOOKUP("secret")),
    recv(REFUSED(0, 0x24, "not authorized for lock")),
    event("refused", lookup=True, code=0x24),
    deadline(1800),
    advance(300),
    call("observe", watch=2, lock="deploy"),
    send(OBSERVE(2, "deploy")),
    recv(OBSERVING(2), STATE(2, HELD_T0)),
    event("observing", watch=2),
    state_event(2, HELD_T0),
    deadline(1900),
    next_heartbeat(800),
)

SPLIT_STATE = STATE(1, HELD_T0)
SPLIT_LOOKUP = LOCK_STATE(LOOKED_HELD)
SPLIT_FEATURES = FEATURES()

vector(
    "v2x-half-frames",
    "Frames split across reads: OPENED and the first 3 bytes of FEATURES in "
    "one read, the rest in the next; OBSERVING and 10 bytes of STATE, then "
    "the STATE up to inside its value_len, then the rest; a LOCK_STATE cut "
    "inside its value. Nothing happens until a frame is whole.",
    call("open", features=1),
    send(OPEN(), HELLO()),
    recv_hex(OPENED() + SPLIT_FEATURES[:3]),
    next_heartbeat(None),
    recv_hex(SPLIT_FEATURES[3:]),
    event("features", features=1, max_watches=1024),
    advance(100),
    call("observe", watch=1, lock="deploy"),
    send(OBSERVE(1, "deploy")),
    recv_hex(OBSERVING(1) + SPLIT_STATE[:10]),
    event("observing", watch=1),
    recv_hex(SPLIT_STATE[10:25]),
    recv_hex(SPLIT_STATE[25:]),
    state_event(1, HELD_T0),
    advance(200),
    call("lookup", lock="deploy"),
    send(LOOKUP("deploy")),
    recv_hex(SPLIT_LOOKUP[:26]),
    next_heartbeat(None),
    recv_hex(SPLIT_LOOKUP[26:]),
    lock_state_event(LOOKED_HELD),
    deadline(1800),
    next_heartbeat(700),
)


# --- writing -------------------------------------------------------------


def render(v):
    lines = ["{"]
    for key in ("name", "description", "protocol", "lease_ms"):
        lines.append(f"  {json.dumps(key)}: {json.dumps(v[key], ensure_ascii=False)},")
    lines.append('  "steps": [')
    steps = [json.dumps(s, ensure_ascii=False) for s in v["steps"]]
    lines.append(",\n".join("    " + s for s in steps))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for v in VECTORS:
        path = os.path.join(HERE, v["name"] + ".json")
        text = render(v)
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(path)
            except FileNotFoundError:
                stale.append(path)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    names = sorted(f for f in os.listdir(HERE) if f.startswith("v2x-") and f.endswith(".json"))
    unknown = sorted(set(names) - {v["name"] + ".json" for v in VECTORS})
    if unknown:
        print("v2x files this script does not write:", ", ".join(unknown), file=sys.stderr)
        return 1
    if stale:
        print("stale (run v2x.py):", ", ".join(stale), file=sys.stderr)
        return 1
    print(f"{len(VECTORS)} v2x vectors {'up to date' if check else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
