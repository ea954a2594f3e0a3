//! Property tests of protocol v2: no input panics a decoder, whatever the
//! chunking; every frame survives an encode/decode round trip.

use monolock_proto::{ErrorCode, Lease, LockName, v2};
use proptest::prelude::*;

/// What a server reads from `bytes` (after OPEN) fed in `chunks`: each
/// request as the bytes it used, and whether the session was ended.
fn feed(bytes: &[u8], chunks: &[usize]) -> (Vec<Vec<u8>>, Option<ErrorCode>) {
    let mut frames = Vec::new();
    let mut buf = Vec::new();
    let mut offset: usize = 0;
    for &chunk in chunks.iter().chain(std::iter::once(&usize::MAX)) {
        let end = offset.saturating_add(chunk.max(1)).min(bytes.len());
        buf.extend_from_slice(&bytes[offset..end]);
        offset = end;
        loop {
            match v2::decode_request(&buf) {
                Ok(Some((_, used))) => {
                    assert!(used > 0 && used <= buf.len());
                    frames.push(buf.drain(..used).collect());
                }
                Ok(None) => break,
                Err(err) => {
                    assert!(!err.code.is_temporary());
                    return (frames, Some(err.code));
                }
            }
        }
        if offset == bytes.len() {
            break;
        }
    }
    (frames, None)
}

fn client_frame() -> impl Strategy<Value = v2::ClientFrame> {
    let name = "\\PC{1,60}".prop_filter_map("valid name", |s| LockName::new(s).ok());
    prop_oneof![
        (any::<u32>(), any::<bool>(), name).prop_map(|(claim, try_only, name)| {
            v2::ClientFrame::Acquire {
                claim,
                mode: if try_only {
                    v2::Mode::Try
                } else {
                    v2::Mode::Wait
                },
                name,
            }
        }),
        any::<u32>().prop_map(|claim| v2::ClientFrame::Release { claim }),
        Just(v2::ClientFrame::Ping),
    ]
}

fn server_frame() -> impl Strategy<Value = v2::ServerFrame> {
    let reason = "\\PC{0,40}";
    prop_oneof![
        (any::<u64>(), any::<u32>()).prop_map(|(session, max_claims)| v2::ServerFrame::Opened {
            session,
            max_claims
        }),
        (any::<u32>(), any::<u64>())
            .prop_map(|(claim, token)| v2::ServerFrame::Acquired { claim, token }),
        (any::<u32>(), any::<u64>())
            .prop_map(|(claim, token)| v2::ServerFrame::Granted { claim, token }),
        any::<u32>().prop_map(|claim| v2::ServerFrame::Waiting { claim }),
        any::<u32>().prop_map(|claim| v2::ServerFrame::Busy { claim }),
        any::<u32>().prop_map(|claim| v2::ServerFrame::Released { claim }),
        Just(v2::ServerFrame::Pong),
        (any::<u32>(), any::<u8>(), reason).prop_map(|(claim, code, reason)| {
            v2::ServerFrame::Refused {
                claim,
                code: ErrorCode(code),
                reason,
            }
        }),
        (any::<u32>(), any::<u8>(), reason).prop_map(|(claim, code, reason)| {
            v2::ServerFrame::Revoked {
                claim,
                code: ErrorCode(code),
                reason,
            }
        }),
        (any::<u8>(), reason).prop_map(|(code, reason)| v2::ServerFrame::Error {
            code: ErrorCode(code),
            reason
        }),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_in_any_chunking(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        chunks in proptest::collection::vec(1usize..40, 0..30),
    ) {
        prop_assert_eq!(feed(&bytes, &[]), feed(&bytes, &chunks));
        let _ = v2::decode_open(&bytes);
        let mut buf = bytes.as_slice();
        while let Ok(Some((_, used))) = v2::decode_response(buf) {
            prop_assert!(used > 0);
            buf = &buf[used..];
        }
    }

    #[test]
    fn client_frames_round_trip(
        lease in 1u32..,
        frames in proptest::collection::vec(client_frame(), 0..30),
        chunks in proptest::collection::vec(1usize..10, 0..50),
    ) {
        let open = v2::ClientFrame::Open { lease: Lease::from_millis(lease).unwrap() }.to_bytes();
        prop_assert_eq!(v2::decode_open(&open), Ok(Some((Lease::from_millis(lease).unwrap(), 6))));
        let mut bytes = Vec::new();
        for frame in &frames {
            frame.encode(&mut bytes);
        }
        let (decoded, ended) = feed(&bytes, &chunks);
        prop_assert_eq!(ended, None);
        let expected: Vec<Vec<u8>> = frames.iter().map(v2::ClientFrame::to_bytes).collect();
        prop_assert_eq!(decoded, expected);
    }

    #[test]
    fn server_frames_round_trip(frames in proptest::collection::vec(server_frame(), 1..20)) {
        let mut bytes = Vec::new();
        for frame in &frames {
            frame.encode(&mut bytes);
        }
        let mut decoded = Vec::new();
        let mut buf = bytes.as_slice();
        while let Some((frame, used)) = v2::decode_response(buf).unwrap() {
            decoded.push(frame);
            buf = &buf[used..];
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(decoded, frames);
    }
}
