//! Decoder properties, checked on arbitrary bytes.
//!
//! For every input: no panic; every decoded frame used between 1 and the
//! available bytes and re-encodes to exactly the bytes it used; errors are
//! client-error codes (server side) or undefined type bytes (client side);
//! and feeding the same bytes in small chunks, as TCP may deliver them,
//! decodes exactly the same frames and ends the same way.

use monolock_proto::{
    ClientFrame, DecodeError, Phase, RequestError, ServerFrame, decode_request, decode_response,
    msg, v2,
};

/// How a stream of requests ended.
#[derive(Debug, PartialEq, Eq)]
enum RequestEnd {
    /// All bytes used, or a partial frame waiting for more.
    NeedMore,
    /// Refused with this error.
    Refused(RequestError),
}

/// Decodes `data` as a server would, starting in `phase`, receiving it in
/// chunks of `chunk` bytes (`usize::MAX`: all at once).
fn feed_requests(data: &[u8], phase: Phase, chunk: usize) -> (Vec<ClientFrame>, RequestEnd) {
    let mut frames = Vec::new();
    let mut phase = phase;
    let mut buf: Vec<u8> = Vec::new();
    let mut offset = 0;
    loop {
        let end = offset + chunk.min(data.len() - offset);
        buf.extend_from_slice(&data[offset..end]);
        offset = end;
        loop {
            match decode_request(&buf, phase) {
                Ok(Some((frame, used))) => {
                    assert!(
                        used > 0 && used <= buf.len(),
                        "used {used} of {}",
                        buf.len()
                    );
                    assert_eq!(
                        frame.to_bytes(),
                        buf[..used],
                        "{frame} does not re-encode to the bytes it came from"
                    );
                    buf.drain(..used);
                    phase = Phase::Established;
                    frames.push(frame);
                }
                Ok(None) => break,
                Err(err) => {
                    assert!(
                        !err.code.is_temporary(),
                        "a request error must be a client error, got {}",
                        err.code
                    );
                    return (frames, RequestEnd::Refused(err));
                }
            }
        }
        if offset == data.len() {
            return (frames, RequestEnd::NeedMore);
        }
    }
}

/// Checks server-side decoding of `data` starting in `phase`.
pub fn check_requests(data: &[u8], phase: Phase) {
    let whole = feed_requests(data, phase, usize::MAX);
    for chunk in [1, 2, 3, 7] {
        assert_eq!(
            feed_requests(data, phase, chunk),
            whole,
            "chunks of {chunk} decode differently"
        );
    }
    if phase == Phase::Established {
        // After ACQUIRE every valid frame is one heartbeat byte.
        assert!(whole.0.iter().all(|f| *f == ClientFrame::Heartbeat));
    }
}

/// How a stream of responses ended.
#[derive(Debug, PartialEq, Eq)]
enum ResponseEnd {
    NeedMore,
    Unknown(u8),
}

fn feed_responses(data: &[u8], chunk: usize) -> (Vec<ServerFrame>, ResponseEnd) {
    let mut frames = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut offset = 0;
    loop {
        let end = offset + chunk.min(data.len() - offset);
        buf.extend_from_slice(&data[offset..end]);
        offset = end;
        loop {
            match decode_response(&buf) {
                Ok(Some((frame, used))) => {
                    assert!(
                        used > 0 && used <= buf.len(),
                        "used {used} of {}",
                        buf.len()
                    );
                    let exact = match &frame {
                        // A reason that was not UTF-8 is decoded lossily.
                        ServerFrame::Error { .. } => std::str::from_utf8(&buf[3..used]).is_ok(),
                        _ => true,
                    };
                    if exact {
                        assert_eq!(
                            frame.to_bytes(),
                            buf[..used],
                            "{frame:?} does not re-encode"
                        );
                    }
                    buf.drain(..used);
                    frames.push(frame);
                }
                Ok(None) => break,
                Err(DecodeError::UnknownType(byte)) => {
                    assert!(
                        ![msg::WAITING, msg::ACQUIRED, msg::ERROR].contains(&byte),
                        "a defined type 0x{byte:02x} was refused"
                    );
                    assert_eq!(buf.first(), Some(&byte));
                    return (frames, ResponseEnd::Unknown(byte));
                }
            }
        }
        if offset == data.len() {
            return (frames, ResponseEnd::NeedMore);
        }
    }
}

/// Checks client-side decoding of `data`.
pub fn check_responses(data: &[u8]) {
    let whole = feed_responses(data, usize::MAX);
    for chunk in [1, 2, 5] {
        assert_eq!(
            feed_responses(data, chunk),
            whole,
            "chunks of {chunk} decode differently"
        );
    }
}

/// Decodes `data` as the requests of an open protocol v2 session, received
/// in chunks of `chunk` bytes: each whole frame's bytes, and the code that
/// ended the session, if any.
fn feed_v2_requests(data: &[u8], chunk: usize) -> (Vec<Vec<u8>>, Option<u8>) {
    let mut frames = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut offset = 0;
    loop {
        let end = offset + chunk.min(data.len() - offset);
        buf.extend_from_slice(&data[offset..end]);
        offset = end;
        loop {
            match v2::decode_request(&buf) {
                Ok(Some((request, used))) => {
                    assert!(
                        used > 0 && used <= buf.len(),
                        "used {used} of {}",
                        buf.len()
                    );
                    // A valid frame re-encodes to exactly its bytes.
                    let again = match request {
                        v2::Request::Acquire { claim, mode, name } => {
                            let name = monolock_proto::LockName::new(name)
                                .expect("the decoder checked the name");
                            Some(v2::ClientFrame::Acquire { claim, mode, name }.to_bytes())
                        }
                        v2::Request::Release { claim } => Some(v2::release_frame(claim).to_vec()),
                        v2::Request::Ping => Some(vec![v2::msg::PING]),
                        v2::Request::BadAcquire { code, .. } => {
                            assert!(!code.is_temporary(), "a refused ACQUIRE is a client error");
                            None
                        }
                    };
                    if let Some(again) = again {
                        assert_eq!(again, buf[..used], "{request:?} does not re-encode");
                    }
                    frames.push(buf.drain(..used).collect());
                }
                Ok(None) => break,
                Err(err) => {
                    assert!(!err.code.is_temporary(), "{}", err.code);
                    return (frames, Some(err.code.0));
                }
            }
        }
        if offset == data.len() {
            return (frames, None);
        }
    }
}

/// Checks the protocol v2 decoders on `data`: the server side (an OPEN,
/// then the requests of a session), whole and chunked, and the client side.
pub fn check_v2(data: &[u8]) {
    let _ = v2::decode_open(data);
    let whole = feed_v2_requests(data, usize::MAX);
    for chunk in [1, 2, 3, 7] {
        assert_eq!(
            feed_v2_requests(data, chunk),
            whole,
            "chunks of {chunk} decode differently"
        );
    }
    let mut buf = data;
    while let Ok(Some((frame, used))) = v2::decode_response(buf) {
        assert!(used > 0 && used <= buf.len());
        let lossless = match &frame {
            v2::ServerFrame::Refused { .. } | v2::ServerFrame::Revoked { .. } => {
                std::str::from_utf8(&buf[7..used]).is_ok()
            }
            v2::ServerFrame::Error { .. } => std::str::from_utf8(&buf[3..used]).is_ok(),
            _ => true,
        };
        if lossless {
            assert_eq!(
                frame.to_bytes(),
                buf[..used],
                "{frame:?} does not re-encode"
            );
        }
        buf = &buf[used..];
    }
}
