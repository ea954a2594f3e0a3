use super::*;
use crate::Lease;

fn name(text: &str) -> LockName {
    LockName::new(text).expect("valid name")
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

const T0: u64 = 0x0006_b49d_2000_0000;
const SINCE: u64 = 1_796_300_000_000;

fn held(event: StateEvent, flags: u8, token: u64, since_ms: u64, value: &str) -> LockState {
    LockState {
        event,
        flags,
        token,
        since_ms,
        reason: None,
        value: value.to_owned(),
    }
}

/// The worked exchange of docs/protocol.md's extension part, byte for byte.
#[test]
fn the_documented_exchange_encodes_as_written() {
    let lease = Lease::from_millis(2000).expect("positive");
    let released = LockState {
        event: StateEvent::Released,
        flags: 0,
        token: T0,
        since_ms: SINCE + 1500,
        reason: Some(ReleaseReason::Released),
        value: String::new(),
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            [
                v2::ClientFrame::Open { lease }.to_bytes(),
                ClientFrame::Hello { features: 1 }.to_bytes(),
            ]
            .concat(),
            "01 02 00 00 07 d0 24 00 00 00 01",
        ),
        (
            features_frame(1, 1024).to_vec(),
            "39 00 00 00 01 00 00 04 00",
        ),
        (
            ClientFrame::AcquireValue {
                claim: 1,
                mode: Mode::Wait,
                name: name("deploy"),
                value: "10.0.0.7:9000".to_owned(),
            }
            .to_bytes(),
            "25 00 00 00 01 00 06 64 65 70 6c 6f 79 00 0d 31 30 2e 30 2e 30 2e 37 3a 39 30 30 30",
        ),
        (
            ClientFrame::Observe {
                watch: 7,
                name: name("deploy"),
            }
            .to_bytes(),
            "27 00 00 00 07 06 64 65 70 6c 6f 79",
        ),
        (
            ServerFrame::Observing { watch: 7 }.to_bytes(),
            "3b 00 00 00 07",
        ),
        (
            ServerFrame::State {
                watch: 7,
                state: held(StateEvent::Held, FLAG_INITIAL, T0, SINCE, "10.0.0.7:9000"),
            }
            .to_bytes(),
            "3e 00 00 00 07 01 01 00 06 b4 9d 20 00 00 00 00 00 01 a2 3b d2 cb 00 00 00 0d \
             31 30 2e 30 2e 30 2e 37 3a 39 30 30 30",
        ),
        (
            ClientFrame::Proclaim {
                claim: 1,
                value: "10.0.0.7:9001".to_owned(),
            }
            .to_bytes(),
            "26 00 00 00 01 00 0d 31 30 2e 30 2e 30 2e 37 3a 39 30 30 31",
        ),
        (
            ServerFrame::Proclaimed { claim: 1 }.to_bytes(),
            "3a 00 00 00 01",
        ),
        (
            ServerFrame::State {
                watch: 7,
                state: released,
            }
            .to_bytes(),
            "3e 00 00 00 07 04 00 00 06 b4 9d 20 00 00 00 00 00 01 a2 3b d2 d0 dc 01 00 00",
        ),
        (
            ClientFrame::Lookup {
                name: name("deploy"),
            }
            .to_bytes(),
            "29 06 64 65 70 6c 6f 79",
        ),
        (
            ServerFrame::LockState(held(
                StateEvent::Held,
                0,
                T0 + 1,
                SINCE + 1500,
                "10.0.0.8:9000",
            ))
            .to_bytes(),
            "3d 01 00 00 06 b4 9d 20 00 00 01 00 00 01 a2 3b d2 d0 dc 00 00 0d \
             31 30 2e 30 2e 30 2e 38 3a 39 30 30 30",
        ),
        (
            ClientFrame::Unobserve { watch: 7 }.to_bytes(),
            "28 00 00 00 07",
        ),
        (
            ServerFrame::Unobserved { watch: 7 }.to_bytes(),
            "3c 00 00 00 07",
        ),
    ];
    for (bytes, expected) in cases {
        let expected = expected.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(hex(&bytes), expected);
    }
}

fn every_server_frame() -> Vec<ServerFrame> {
    let mut coalesced = held(StateEvent::Free, FLAG_COALESCED, T0, SINCE, "");
    coalesced.reason = None;
    vec![
        ServerFrame::Features {
            features: FEATURE_VALUES_AND_OBSERVERS,
            max_watches: 3,
        },
        ServerFrame::Proclaimed { claim: 9 },
        ServerFrame::Observing { watch: 0 },
        ServerFrame::Unobserved { watch: u32::MAX },
        ServerFrame::LockState(held(StateEvent::Free, 0, 0, 0, "")),
        ServerFrame::State {
            watch: 2,
            state: held(StateEvent::Granted, 0, T0, SINCE, "ünïcode"),
        },
        ServerFrame::State {
            watch: 2,
            state: coalesced,
        },
        ServerFrame::State {
            watch: 3,
            state: held(StateEvent::Value, 0, T0, SINCE, &"v".repeat(MAX_VALUE_LEN)),
        },
    ]
}

#[test]
fn server_frames_round_trip_and_every_prefix_needs_more() {
    for frame in every_server_frame() {
        let bytes = frame.to_bytes();
        for cut in 0..bytes.len() {
            assert_eq!(
                decode_response(&bytes[..cut]).unwrap(),
                None,
                "{frame:?} cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0x35);
        assert_eq!(
            decode_response(&longer).unwrap(),
            Some((Response::Ext(frame.clone()), bytes.len()))
        );
        assert!(
            Response::Ext(frame.clone()).is_reply() != matches!(frame, ServerFrame::State { .. })
        );
    }
}

#[test]
fn version_2_frames_decode_as_base() {
    let pong = decode_response(&[0x35]).unwrap();
    assert_eq!(pong, Some((Response::Base(v2::ServerFrame::Pong), 1)));
    let granted = v2::granted_frame(1, 2);
    let (frame, _) = decode_response(&granted).unwrap().unwrap();
    assert!(!frame.is_reply());
    assert_eq!(
        decode_response(&[0x7f]),
        Err(DecodeError::UnknownType(0x7f))
    );
    let mut bad_event = ServerFrame::LockState(held(StateEvent::Free, 0, 0, 0, "")).to_bytes();
    bad_event[1] = 9;
    assert_eq!(
        decode_response(&bad_event),
        Err(DecodeError::UnknownEvent(9))
    );
}

fn every_client_frame() -> Vec<ClientFrame> {
    vec![
        ClientFrame::Hello { features: 1 },
        ClientFrame::AcquireValue {
            claim: 4,
            mode: Mode::Try,
            name: name("x"),
            value: String::new(),
        },
        ClientFrame::Proclaim {
            claim: 4,
            value: "a:1".to_owned(),
        },
        ClientFrame::Observe {
            watch: 4,
            name: name(&"n".repeat(255)),
        },
        ClientFrame::Unobserve { watch: 4 },
        ClientFrame::Lookup { name: name("ü") },
    ]
}

#[test]
fn client_frames_decode_server_side_and_every_prefix_needs_more() {
    for frame in every_client_frame() {
        let bytes = frame.to_bytes();
        for cut in 0..bytes.len() {
            assert_eq!(
                decode_request(&bytes[..cut]).unwrap(),
                None,
                "{frame} cut at {cut}"
            );
        }
        let (request, used) = decode_request(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len(), "{frame}");
        assert!(request.is_extension());
        let same = match (&frame, request) {
            (ClientFrame::Hello { features }, Request::Hello { features: f }) => *features == f,
            (
                ClientFrame::AcquireValue {
                    claim,
                    mode,
                    name,
                    value,
                },
                Request::AcquireValue {
                    claim: c,
                    mode: m,
                    name: n,
                    value: v,
                },
            ) => *claim == c && *mode == m && name.as_str() == n && value == v,
            (ClientFrame::Proclaim { claim, value }, Request::Proclaim { claim: c, value: v }) => {
                *claim == c && value == v
            }
            (ClientFrame::Observe { watch, name }, Request::Observe { watch: w, name: n }) => {
                *watch == w && name.as_str() == n
            }
            (ClientFrame::Unobserve { watch }, Request::Unobserve { watch: w }) => *watch == w,
            (ClientFrame::Lookup { name }, Request::Lookup { name: n }) => name.as_str() == n,
            _ => false,
        };
        assert!(same, "{frame} decoded as {request:?}");
    }
    let (ping, _) = decode_request(&[0x23]).unwrap().unwrap();
    assert!(!ping.is_extension());
    assert_eq!(
        decode_request(&[0x7f]).unwrap_err().code,
        ErrorCode::UNKNOWN_MESSAGE_TYPE
    );
}

fn refused_code(bytes: &[u8]) -> (u32, ErrorCode) {
    match decode_request(bytes).unwrap() {
        Some((Request::Refuse { id, code, .. }, used)) => {
            assert_eq!(used, bytes.len());
            (id, code)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The validation order of docs/protocol.md: mode, name, value.
#[test]
fn refusals_follow_the_documented_order() {
    let acquire = |mode: u8, name: &[u8], value: &[u8]| {
        let mut b = vec![msg::ACQUIRE_VALUE, 0, 0, 0, 5, mode, name.len() as u8];
        b.extend_from_slice(name);
        b.extend_from_slice(&(value.len() as u16).to_be_bytes());
        b.extend_from_slice(value);
        b
    };
    let long = vec![b'v'; MAX_VALUE_LEN + 1];
    assert_eq!(
        refused_code(&acquire(7, b"", &long)),
        (5, ErrorCode::UNKNOWN_MODE)
    );
    assert_eq!(
        refused_code(&acquire(0, b"", &long)),
        (5, ErrorCode::CLAIM_EMPTY_NAME)
    );
    assert_eq!(
        refused_code(&acquire(0, &[0xff], &long)),
        (5, ErrorCode::CLAIM_NAME_NOT_UTF8)
    );
    assert_eq!(
        refused_code(&acquire(0, b"a", &long)),
        (5, ErrorCode::VALUE_TOO_LONG)
    );
    assert_eq!(
        refused_code(&acquire(1, b"a", &[0xc3])),
        (5, ErrorCode::VALUE_NOT_UTF8)
    );
    let mut proclaim = vec![msg::PROCLAIM, 0, 0, 0, 6];
    proclaim.extend_from_slice(&(long.len() as u16).to_be_bytes());
    proclaim.extend_from_slice(&long);
    assert_eq!(refused_code(&proclaim), (6, ErrorCode::VALUE_TOO_LONG));
    assert_eq!(
        refused_code(&[msg::OBSERVE, 0, 0, 0, 8, 0]),
        (8, ErrorCode::CLAIM_EMPTY_NAME)
    );
    assert_eq!(
        refused_code(&[msg::LOOKUP, 1, 0x80]),
        (0, ErrorCode::CLAIM_NAME_NOT_UTF8)
    );
}

/// No input makes a decoder panic; every frame decoded uses at most the
/// bytes given.
#[test]
fn arbitrary_bytes_never_panic() {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..20_000 {
        let len = (next() % 40) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if let Some(first) = bytes.first_mut() {
            // Bias toward the extension's type bytes.
            *first = 0x24 + (*first % 0x1b);
        }
        if let Ok(Some((_, used))) = decode_request(&bytes) {
            assert!(used <= bytes.len());
        }
        if let Ok(Some((_, used))) = decode_response(&bytes) {
            assert!(used <= bytes.len());
        }
    }
}
