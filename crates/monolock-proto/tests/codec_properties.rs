//! Property tests: no input panics a decoder, whatever the chunking, and
//! every frame survives an encode/decode round trip.

use monolock_proto::{
    ClientFrame, ErrorCode, Lease, LockName, Phase, ServerFrame, decode_request, decode_response,
};
use proptest::prelude::*;

/// Feeds `bytes` to the server-side decoder in the given chunk sizes, the way
/// a connection would, and returns the frames decoded before the first error.
fn feed_requests(bytes: &[u8], chunks: &[usize]) -> (Vec<ClientFrame>, bool) {
    let mut frames = Vec::new();
    let mut buf = Vec::new();
    let mut phase = Phase::AwaitingAcquire;
    let mut offset: usize = 0;
    for &chunk in chunks.iter().chain(std::iter::once(&usize::MAX)) {
        let end = offset.saturating_add(chunk.max(1)).min(bytes.len());
        buf.extend_from_slice(&bytes[offset..end]);
        offset = end;
        loop {
            match decode_request(&buf, phase) {
                Ok(Some((frame, used))) => {
                    assert!(used > 0 && used <= buf.len());
                    buf.drain(..used);
                    phase = Phase::Established;
                    frames.push(frame);
                }
                Ok(None) => break,
                Err(_) => return (frames, true),
            }
        }
        if offset == bytes.len() {
            break;
        }
    }
    (frames, false)
}

fn lock_name() -> impl Strategy<Value = LockName> {
    "\\PC{1,60}".prop_filter_map("valid name", |s| LockName::new(s).ok())
}

fn server_frame() -> impl Strategy<Value = ServerFrame> {
    prop_oneof![
        Just(ServerFrame::Waiting),
        any::<u64>().prop_map(|token| ServerFrame::Acquired { token }),
        (any::<u8>(), "\\PC{0,80}").prop_map(|(code, reason)| ServerFrame::Error {
            code: ErrorCode(code),
            reason: reason.chars().take(80).collect::<String>()
        }),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_in_any_chunking(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        chunks in proptest::collection::vec(1usize..40, 0..30),
    ) {
        let whole = feed_requests(&bytes, &[]);
        let pieces = feed_requests(&bytes, &chunks);
        // Chunking never changes what is decoded.
        prop_assert_eq!(whole, pieces);
        let mut buf = bytes.as_slice();
        while let Ok(Some((_, used))) = decode_response(buf) {
            buf = &buf[used..];
        }
    }

    #[test]
    fn client_frames_round_trip(
        lease in 1u32..,
        name in lock_name(),
        heartbeats in 0usize..20,
        chunks in proptest::collection::vec(1usize..10, 0..50),
    ) {
        let acquire = ClientFrame::acquire(Lease::from_millis(lease).unwrap(), name);
        let mut bytes = acquire.to_bytes();
        for _ in 0..heartbeats {
            ClientFrame::Heartbeat.encode(&mut bytes);
        }
        let (frames, failed) = feed_requests(&bytes, &chunks);
        prop_assert!(!failed);
        prop_assert_eq!(frames.len(), heartbeats + 1);
        prop_assert_eq!(&frames[0], &acquire);
        prop_assert!(frames[1..].iter().all(|f| *f == ClientFrame::Heartbeat));
    }

    #[test]
    fn server_frames_round_trip(frames in proptest::collection::vec(server_frame(), 1..20)) {
        let mut bytes = Vec::new();
        for frame in &frames {
            frame.encode(&mut bytes);
        }
        let mut decoded = Vec::new();
        let mut buf = bytes.as_slice();
        while let Some((frame, used)) = decode_response(buf).unwrap() {
            decoded.push(frame);
            buf = &buf[used..];
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(decoded, frames);
    }
}
