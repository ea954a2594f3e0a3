#!/usr/bin/env python3
"""Decodes every frame of every v2x-*.json vector and checks it against
docs/protocol.md ("Version 2 extension: values and observers").

    python3 clients/conformance/vectors/check_frames.py [FILE ...]

Written apart from v2x.py (it shares no code with it) so that a mistake
in one is caught by the other. For each vector it checks:

- every `send` is exactly one whole client frame, every length field
  agreeing with the bytes that follow; the first is OPEN with the
  vector's lease, and each call's fields are the frame's that follows it;
- the `recv` bytes, read in order, split into whole server frames with
  no byte left over, every length field agreeing, every state well formed
  (event, reason and value as the page allows);
- every event is explained by a frame of the read just before it: the
  same claim, watch, token, code, state fields, in order;
- tokens and instants are JSON integers below 2^53; claim and watch ids
  are numbered 1, 2, 3, ... in call order.
"""

import glob
import json
import os
import sys

MAX_VALUE = 1024
SAFE = 2**53

STATE_EVENTS = ["free", "held", "granted", "value", "released"]
REASONS = [None, "released", "expired", "forced", "ended_by_server"]


class Bad(Exception):
    pass


class Reader:
    def __init__(self, data):
        self.data = data
        self.at = 0

    def take(self, n, what):
        if self.at + n > len(self.data):
            raise Incomplete(what)
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def int(self, n, what):
        return int.from_bytes(self.take(n, what), "big")

    def text(self, len_bytes, what):
        n = self.int(len_bytes, what + " length")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise Bad(f"{what} is not UTF-8: {raw.hex()}") from err


class Incomplete(Exception):
    pass


def read_client_frame(r):
    kind = r.int(1, "type")
    if kind == 0x01:
        version = r.int(1, "version")
        if version != 2:
            raise Bad(f"OPEN with version {version}")
        return {"frame": "OPEN", "lease_ms": r.int(4, "lease")}
    if kind in (0x21, 0x25):
        f = {
            "frame": "ACQUIRE" if kind == 0x21 else "ACQUIRE_VALUE",
            "claim": r.int(4, "claim"),
        }
        mode = r.int(1, "mode")
        if mode not in (0, 1):
            raise Bad(f"mode {mode}")
        f["mode"] = ["wait", "try"][mode]
        f["lock"] = r.text(1, "name")
        if kind == 0x25:
            f["value"] = r.text(2, "value")
        return f
    if kind == 0x22:
        return {"frame": "RELEASE", "claim": r.int(4, "claim")}
    if kind == 0x23:
        return {"frame": "PING"}
    if kind == 0x24:
        return {"frame": "HELLO", "features": r.int(4, "features")}
    if kind == 0x26:
        return {"frame": "PROCLAIM", "claim": r.int(4, "claim"), "value": r.text(2, "value")}
    if kind == 0x27:
        return {"frame": "OBSERVE", "watch": r.int(4, "watch"), "lock": r.text(1, "name")}
    if kind == 0x28:
        return {"frame": "UNOBSERVE", "watch": r.int(4, "watch")}
    if kind == 0x29:
        return {"frame": "LOOKUP", "lock": r.text(1, "name")}
    raise Bad(f"client type byte 0x{kind:02x}")


def read_state(r):
    code = r.int(1, "event")
    if code >= len(STATE_EVENTS):
        raise Bad(f"state event 0x{code:02x}")
    flags = r.int(1, "flags")
    token = r.int(8, "token")
    since = r.int(8, "since_ms")
    reason = r.int(1, "reason")
    if reason >= len(REASONS):
        raise Bad(f"state reason 0x{reason:02x}")
    value = r.text(2, "value")
    event = STATE_EVENTS[code]
    if (event == "released") != (reason != 0):
        raise Bad(f"reason {reason} with event {event}")
    if event in ("free", "released") and value:
        raise Bad(f"{event} with a value")
    if len(value.encode()) > MAX_VALUE:
        raise Bad("value above 1024 bytes")
    return {
        "state_event": event,
        "initial": bool(flags & 0x01),
        "coalesced": bool(flags & 0x02),
        "token": token,
        "since_ms": since,
        "reason": REASONS[reason],
        "value": value,
    }


def read_server_frame(r):
    kind = r.int(1, "type")
    if kind == 0x30:
        return {"frame": "OPENED", "session": r.int(8, "session"), "max_claims": r.int(4, "max")}
    if kind in (0x31, 0x37):
        return {
            "frame": "ACQUIRED" if kind == 0x31 else "GRANTED",
            "claim": r.int(4, "claim"),
            "token": r.int(8, "token"),
        }
    simple = {0x32: "WAITING", 0x33: "BUSY", 0x34: "RELEASED", 0x3A: "PROCLAIMED"}
    if kind in simple:
        return {"frame": simple[kind], "claim": r.int(4, "claim")}
    if kind in (0x3B, 0x3C):
        return {"frame": "OBSERVING" if kind == 0x3B else "UNOBSERVED", "watch": r.int(4, "watch")}
    if kind == 0x35:
        return {"frame": "PONG"}
    if kind in (0x36, 0x38):
        return {
            "frame": "REFUSED" if kind == 0x36 else "REVOKED",
            "id": r.int(4, "id"),
            "code": r.int(1, "code"),
            "reason": r.text(1, "reason"),
        }
    if kind == 0x13:
        return {"frame": "ERROR", "code": r.int(1, "code"), "reason": r.text(1, "reason")}
    if kind == 0x39:
        return {"frame": "FEATURES", "features": r.int(4, "features"), "max_watches": r.int(4, "max")}
    if kind == 0x3D:
        return {"frame": "LOCK_STATE", **read_state(r)}
    if kind == 0x3E:
        watch = r.int(4, "watch")
        return {"frame": "STATE", "watch": watch, **read_state(r)}
    raise Bad(f"server type byte 0x{kind:02x}")


def check_send_matches_call(call, frames):
    """The frames one call writes, as docs/protocol.md and the README say."""
    name = call["call"]
    if name == "open":
        want = [{"frame": "OPEN"}]
        if "features" in call:
            want.append({"frame": "HELLO", "features": call["features"]})
    elif name == "acquire":
        f = {"frame": "ACQUIRE", "claim": call["claim"], "mode": call["mode"], "lock": call["lock"]}
        if "value" in call:
            f.update(frame="ACQUIRE_VALUE", value=call["value"])
        want = [f]
    elif name == "release":
        want = [{"frame": "RELEASE", "claim": call["claim"]}]
    elif name == "proclaim":
        want = [{"frame": "PROCLAIM", "claim": call["claim"], "value": call["value"]}]
    elif name == "observe":
        want = [{"frame": "OBSERVE", "watch": call["watch"], "lock": call["lock"]}]
    elif name == "unobserve":
        want = [{"frame": "UNOBSERVE", "watch": call["watch"]}]
    elif name == "lookup":
        want = [{"frame": "LOOKUP", "lock": call["lock"]}]
    else:
        raise Bad(f"unknown call {name}")
    if len(frames) != len(want):
        raise Bad(f"call {name} followed by {len(frames)} frames, expected {len(want)}")
    for got, exp in zip(frames, want):
        for key, value in exp.items():
            if got.get(key) != value:
                raise Bad(f"call {name}: frame {got} has {key} != {value!r}")


def explain(ev, frames):
    """Finds (and consumes) the frame of the read that gives event `ev`."""
    kind = ev["event"]

    def take(pred):
        for i, f in enumerate(frames):
            if pred(f):
                del frames[i]
                return f
        raise Bad(f"event {ev} has no frame in the read before it")

    if kind == "features":
        take(lambda f: f["frame"] == "FEATURES" and f["features"] == ev["features"] and f["max_watches"] == ev["max_watches"])
    elif kind == "unsupported":
        take(lambda f: f["frame"] == "ERROR" and f["code"] == 0x13)
    elif kind == "granted":
        take(lambda f: f["frame"] in ("ACQUIRED", "GRANTED") and f["claim"] == ev["claim"] and f["token"] == ev["token"])
    elif kind in ("waiting", "busy", "released", "proclaimed"):
        take(lambda f: f["frame"] == kind.upper() and f["claim"] == ev["claim"])
    elif kind in ("observing", "unobserved"):
        take(lambda f: f["frame"] == kind.upper() and f["watch"] == ev["watch"])
    elif kind == "refused":
        keys = [k for k in ("claim", "watch", "lookup") if k in ev]
        if len(keys) != 1:
            raise Bad(f"refused names {keys}")
        frame_id = 0 if keys[0] == "lookup" else ev[keys[0]]
        if keys[0] == "lookup" and ev["lookup"] is not True:
            raise Bad("lookup must be true")
        take(lambda f: f["frame"] == "REFUSED" and f["id"] == frame_id and f["code"] == ev["code"])
    elif kind == "state":
        f = take(lambda f: f["frame"] == "STATE")
        fields = ("watch", "state_event", "initial", "coalesced", "token", "since_ms", "reason", "value")
        for key in fields:
            if f[key] != ev[key]:
                raise Bad(f"state event {key}={ev[key]!r}, the frame says {f[key]!r}")
        if set(ev) != {"step", "event", *fields}:
            raise Bad(f"state event fields {sorted(ev)}")
    elif kind == "lock_state":
        f = take(lambda f: f["frame"] == "LOCK_STATE")
        fields = ("state_event", "token", "since_ms", "value")
        for key in fields:
            if f[key] != ev[key]:
                raise Bad(f"lock_state event {key}={ev[key]!r}, the frame says {f[key]!r}")
        if f["initial"] or f["coalesced"]:
            raise Bad("LOCK_STATE with flags")
        if set(ev) != {"step", "event", *fields}:
            raise Bad(f"lock_state event fields {sorted(ev)}")
    elif kind in ("lost", "watch_lost"):
        pass  # a session's end or a REVOKED: checked by the replayers
    else:
        raise Bad(f"unknown event {kind}")


def check_vector(path):
    with open(path, encoding="utf-8") as f:
        v = json.load(f)
    name = os.path.basename(path)[:-5]
    if v.get("name") != name or v.get("protocol") != 2:
        raise Bad("name or protocol")
    lease = v["lease_ms"]
    buffer = b""
    last_call = None
    sends = []
    read_frames = []
    next_claim = next_watch = 1
    first_send = True
    frame_count = 0

    def close_call():
        if last_call is not None:
            check_send_matches_call(last_call, sends)

    for i, step in enumerate(v["steps"]):
        where = f"step {i}"
        try:
            kind = step["step"]
            for key in ("token", "since_ms", "to", "at"):
                value = step.get(key)
                if value is not None and not (isinstance(value, int) and 0 <= value < SAFE):
                    raise Bad(f"{key} {value!r} is not an integer below 2^53")
            if kind == "send":
                r = Reader(bytes.fromhex(step["hex"]))
                try:
                    frame = read_client_frame(r)
                except Incomplete as err:
                    raise Bad(f"send is not a whole frame (cut in its {err})") from err
                if r.at != len(r.data):
                    raise Bad(f"send has {len(r.data) - r.at} bytes after its frame")
                if first_send:
                    if frame["frame"] != "OPEN" or frame["lease_ms"] != lease:
                        raise Bad("the first send is not OPEN with the vector's lease")
                    first_send = False
                sends.append(frame)
                frame_count += 1
                continue
            if kind in ("call", "recv", "eof", "advance"):
                close_call()
                last_call = None
                sends = []
                read_frames = []
            if kind == "call":
                last_call = step
                if step["call"] == "acquire":
                    if step["claim"] != next_claim:
                        raise Bad(f"claim {step['claim']}, expected {next_claim}")
                    next_claim += 1
                if step["call"] == "observe":
                    if step["watch"] != next_watch:
                        raise Bad(f"watch {step['watch']}, expected {next_watch}")
                    next_watch += 1
            elif kind == "recv":
                buffer += bytes.fromhex(step["hex"])
                while buffer:
                    r = Reader(buffer)
                    try:
                        frame = read_server_frame(r)
                    except Incomplete:
                        break
                    read_frames.append(frame)
                    buffer = buffer[r.at :]
                    frame_count += 1
            elif kind == "event":
                explain(step, read_frames)
        except (Bad, KeyError) as err:
            raise Bad(f"{where} ({json.dumps(step)[:80]}): {err}") from err
    close_call()
    if buffer:
        raise Bad(f"the reads end inside a frame: {buffer.hex()}")
    return frame_count


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    paths = argv or sorted(glob.glob(os.path.join(here, "v2x-*.json")))
    if not paths:
        print("no v2x vectors found", file=sys.stderr)
        return 1
    failed = 0
    frames = 0
    for path in paths:
        try:
            frames += check_vector(path)
        except Bad as err:
            failed += 1
            print(f"{os.path.basename(path)}: {err}", file=sys.stderr)
    print(f"{len(paths)} vectors, {frames} frames decoded, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
