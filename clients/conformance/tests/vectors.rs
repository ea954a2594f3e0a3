//! The shared protocol vectors of the extension (`vectors/v2x-*.json`):
//! the files are the ones `vectors/v2x.py` writes from its descriptions,
//! and `vectors/check_frames.py`, written apart from it, decodes every
//! frame of them again against docs/protocol.md (see the vectors' README).
//!
//! Both are Python 3 programs with no dependency; a missing `python3`
//! fails these tests rather than skipping them.

use std::{path::PathBuf, process::Command};

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

/// Runs `python3 SCRIPT ARGS` in the vectors directory and fails with its
/// output unless it exits 0.
fn run_script(script: &str, args: &[&str]) -> String {
    let dir = vectors_dir();
    let output = Command::new("python3")
        .arg("-B") // no __pycache__ in the source tree
        .arg(dir.join(script))
        .args(args)
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|err| panic!("cannot run python3 {script}: {err}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python3 {script} {args:?} failed ({}):\n{stdout}{stderr}",
        output.status
    );
    stdout
}

#[test]
fn v2x_vectors_are_the_ones_v2x_py_writes() {
    let out = run_script("v2x.py", &["--check"]);
    assert!(out.contains("up to date"), "unexpected output: {out}");
}

#[test]
fn every_frame_of_every_v2x_vector_decodes() {
    let out = run_script("check_frames.py", &[]);
    let files = std::fs::read_dir(vectors_dir())
        .expect("the vectors directory")
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("v2x-") && name.ends_with(".json")
        })
        .count();
    assert!(files >= 19, "only {files} v2x vectors");
    assert!(
        out.starts_with(&format!("{files} vectors, ")) && out.contains(" 0 failed"),
        "check_frames.py did not check all {files} vectors: {out}"
    );
}

/// Every v2x vector read with monolock-proto's own codec (the one the
/// Rust client and the server use): each `send` is exactly one client
/// frame (OPEN first, with the vector's lease); the `recv` bytes split
/// into whole server frames, each extension frame encoding back to the
/// same bytes; and each `features`, `state` and `lock_state` event has
/// the fields of its frame, in the order of the read before it.
#[test]
fn every_v2x_vector_decodes_with_the_proto_codec() {
    let mut checked = 0;
    for entry in std::fs::read_dir(vectors_dir()).expect("the vectors directory") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name.filter(|n| n.starts_with("v2x-") && n.ends_with(".json")) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).expect("a readable vector");
        let vector: serde_json::Value = serde_json::from_str(&text).expect("a JSON vector");
        if let Err(why) = codec::check(&vector) {
            panic!("{name}: {why}");
        }
        checked += 1;
    }
    assert!(checked >= 19, "only {checked} v2x vectors");
}

mod codec {
    use std::collections::VecDeque;

    use monolock_proto::{ext, v2};
    use serde_json::Value;

    fn hex(text: &str) -> Result<Vec<u8>, String> {
        if !text.len().is_multiple_of(2) {
            return Err(format!("odd hex {text:?}"));
        }
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| format!("{text:?}: {e}")))
            .collect()
    }

    fn field<'a>(step: &'a Value, key: &str) -> Result<&'a Value, String> {
        step.get(key).ok_or_else(|| format!("{step}: no {key}"))
    }

    /// The step's state fields as the frame's: the event's name, the
    /// token, since_ms, the value, and for `state` the flags and reason.
    fn same_state(step: &Value, state: &ext::LockState, with_flags: bool) -> Result<(), String> {
        let mut want = serde_json::json!({
            "state_event": state.event.name(),
            "token": state.token,
            "since_ms": state.since_ms,
            "value": state.value,
        });
        if with_flags {
            want["initial"] = state.initial().into();
            want["coalesced"] = state.coalesced().into();
            want["reason"] = state.reason.map(|r| r.name()).into();
        }
        for (key, value) in want.as_object().into_iter().flatten() {
            if field(step, key)? != value {
                return Err(format!("{step}: {key} is not the frame's {value}"));
            }
        }
        Ok(())
    }

    pub fn check(vector: &Value) -> Result<(), String> {
        let lease = field(vector, "lease_ms")?.as_u64();
        let steps = field(vector, "steps")?
            .as_array()
            .ok_or("steps is not an array")?;
        let mut first_send = true;
        let mut unread: Vec<u8> = Vec::new();
        let mut read: VecDeque<ext::ServerFrame> = VecDeque::new();
        for step in steps {
            let kind = field(step, "step")?.as_str().unwrap_or_default();
            if matches!(kind, "call" | "recv" | "eof" | "advance") {
                read.clear();
            }
            match kind {
                "send" => {
                    let bytes = hex(field(step, "hex")?.as_str().unwrap_or_default())?;
                    let used = if first_send {
                        first_send = false;
                        let (opened, used) = v2::decode_open(&bytes)
                            .map_err(|e| format!("{step}: {e:?}"))?
                            .ok_or_else(|| format!("{step}: not a whole OPEN"))?;
                        if Some(u64::from(opened.as_millis())) != lease {
                            return Err(format!("{step}: OPEN's lease is not the vector's"));
                        }
                        used
                    } else {
                        let (request, used) = ext::decode_request(&bytes)
                            .map_err(|e| format!("{step}: {e:?}"))?
                            .ok_or_else(|| format!("{step}: not a whole frame"))?;
                        if matches!(request, ext::Request::Refuse { .. }) {
                            return Err(format!("{step}: a frame a server refuses: {request:?}"));
                        }
                        used
                    };
                    if used != bytes.len() {
                        return Err(format!(
                            "{step}: {} bytes after the frame",
                            bytes.len() - used
                        ));
                    }
                }
                "recv" => {
                    unread.extend(hex(field(step, "hex")?.as_str().unwrap_or_default())?);
                    while let Some((frame, used)) =
                        ext::decode_response(&unread).map_err(|e| format!("{step}: {e}"))?
                    {
                        if let ext::Response::Ext(frame) = frame {
                            if frame.to_bytes() != unread[..used] {
                                return Err(format!("{step}: {frame:?} encodes otherwise"));
                            }
                            read.push_back(frame);
                        }
                        unread.drain(..used);
                    }
                }
                "event" => {
                    let event = field(step, "event")?.as_str().unwrap_or_default();
                    let wanted: fn(&ext::ServerFrame) -> bool = match event {
                        "features" => |f| matches!(f, ext::ServerFrame::Features { .. }),
                        "state" => |f| matches!(f, ext::ServerFrame::State { .. }),
                        "lock_state" => |f| matches!(f, ext::ServerFrame::LockState(_)),
                        _ => continue,
                    };
                    let at = read
                        .iter()
                        .position(wanted)
                        .ok_or_else(|| format!("{step}: no such frame in the read before it"))?;
                    let frame = read.remove(at).ok_or("unreachable")?;
                    match frame {
                        ext::ServerFrame::Features {
                            features,
                            max_watches,
                        } => {
                            if field(step, "features")? != features
                                || field(step, "max_watches")? != max_watches
                            {
                                return Err(format!("{step}: not the frame's {frame:?}"));
                            }
                        }
                        ext::ServerFrame::State { watch, state } => {
                            if field(step, "watch")? != watch {
                                return Err(format!("{step}: the frame's watch is {watch}"));
                            }
                            same_state(step, &state, true)?;
                        }
                        ext::ServerFrame::LockState(state) => same_state(step, &state, false)?,
                        other => return Err(format!("{step}: matched {other:?}")),
                    }
                }
                _ => {}
            }
        }
        if unread.is_empty() {
            Ok(())
        } else {
            Err(format!("the reads end inside a frame: {unread:02x?}"))
        }
    }
}
