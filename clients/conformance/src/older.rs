//! A small server of the runner's that speaks the monolock protocol as the
//! server did before the version 2 extension "values and observers"
//! (docs/protocol.md): version 1, and version 2 without HELLO. It answers
//! HELLO, and every frame of the extension, with ERROR `0x13` (`unknown
//! message type: 0x24`, byte for byte what that server wrote) and closes,
//! so a client's fallback can be checked without an old binary.
//!
//! It is deliberately small: every ACQUIRE is granted at once with the
//! next token (the scenario holds one lock at a time), RELEASE is
//! answered RELEASED, PING PONG; version 1: ACQUIRED, a HEARTBEAT answered
//! ACQUIRED with the same token, the client's half-close answered by the
//! close. It counts what it saw, for the scenario to check.

use std::{
    io::{ErrorKind, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use crate::{Check, Failure};

/// What the server saw, over all its connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// HELLOs answered ERROR `0x13`.
    pub hellos_refused: u64,
    /// Other frames of the extension answered ERROR `0x13`.
    pub extension_frames_refused: u64,
    /// Version 2 ACQUIREs granted (on sessions without HELLO).
    pub v2_grants: u64,
    /// Version 2 RELEASEs answered RELEASED.
    pub v2_releases: u64,
    /// Version 1 ACQUIREs granted.
    pub v1_grants: u64,
}

/// The server; it stops accepting when dropped.
pub struct OlderServer {
    /// Its address (`127.0.0.1:PORT`).
    pub address: String,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
}

impl OlderServer {
    /// Starts it on a free loopback port.
    pub fn start() -> Check<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|err| Failure::new(format!("cannot bind a listener: {err}")))?;
        let address = listener
            .local_addr()
            .map_err(|err| Failure::new(format!("listener address: {err}")))?
            .to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        // Tokens as the real server's: large, and rising across sessions.
        let tokens = Arc::new(AtomicU64::new(0x0006_b49d_2000_0000));
        let (stopped, counts) = (Arc::clone(&stop), Arc::clone(&seen));
        std::thread::spawn(move || {
            // Blocking: `Drop` sets `stop`, then connects once to wake it.
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (counts, tokens) = (Arc::clone(&counts), Arc::clone(&tokens));
                std::thread::spawn(move || {
                    // A connection's end, whatever the cause, is the
                    // client's business: nothing to report.
                    let _ = serve(stream, &counts, &tokens);
                });
            }
        });
        Ok(Self {
            address,
            stop,
            seen,
        })
    }

    /// What it saw so far.
    pub fn seen(&self) -> Seen {
        self.seen.lock().map(|seen| *seen).unwrap_or_default()
    }
}

impl Drop for OlderServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees `stop` and ends; if
        // the connect fails the listener is already gone.
        let _ = TcpStream::connect(&self.address);
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at a clean end of input
/// before the first byte.
fn read_frame_part(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(true)
}

fn read_exact(stream: &mut TcpStream, n: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0; n];
    if read_frame_part(stream, &mut buf)? {
        Ok(buf)
    } else {
        Err(ErrorKind::UnexpectedEof.into())
    }
}

fn count(seen: &Mutex<Seen>, bump: impl FnOnce(&mut Seen)) {
    if let Ok(mut seen) = seen.lock() {
        bump(&mut seen);
    }
}

/// ERROR `0x13` for type byte `kind`, as the server before the extension
/// wrote it, then the close.
fn unknown_type(stream: &mut TcpStream, kind: u8) -> std::io::Result<()> {
    let reason = format!("unknown message type: 0x{kind:02x}");
    let mut frame = vec![0x13, 0x13, u8::try_from(reason.len()).unwrap_or(u8::MAX)];
    frame.extend_from_slice(reason.as_bytes());
    stream.write_all(&frame)?;
    stream.shutdown(std::net::Shutdown::Write)?;
    // As the real server: drain the input briefly before the close, so
    // the ERROR is not lost to a reset.
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut sink = [0u8; 512];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    Ok(())
}

/// One connection, from its first frame to its end.
fn serve(mut stream: TcpStream, seen: &Mutex<Seen>, tokens: &AtomicU64) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    let head = read_exact(&mut stream, 2)?;
    match head.as_slice() {
        [0x01, 0x01] => serve_v1(stream, seen, tokens),
        [0x01, 0x02] => serve_v2(stream, seen, tokens),
        _ => {
            // ERROR 0x10: unsupported protocol version (or 0x11).
            stream.write_all(&[0x13, 0x10, 0])?;
            stream.shutdown(std::net::Shutdown::Write)
        }
    }
}

/// Version 1: ACQUIRE (after its first two bytes), then HEARTBEATs, until
/// the client's half-close.
fn serve_v1(mut stream: TcpStream, seen: &Mutex<Seen>, tokens: &AtomicU64) -> std::io::Result<()> {
    let rest = read_exact(&mut stream, 6)?; // lease u32, name_len u16
    let name_len = usize::from(u16::from_be_bytes([rest[4], rest[5]]));
    read_exact(&mut stream, name_len)?;
    let token = tokens.fetch_add(1, Ordering::Relaxed);
    count(seen, |s| s.v1_grants += 1);
    let mut acquired = vec![0x12];
    acquired.extend_from_slice(&token.to_be_bytes());
    stream.write_all(&acquired)?;
    let mut kind = [0u8; 1];
    while read_frame_part(&mut stream, &mut kind)? {
        if kind[0] != 0x02 {
            return unknown_type(&mut stream, kind[0]);
        }
        stream.write_all(&acquired)?;
    }
    stream.shutdown(std::net::Shutdown::Write)
}

/// Version 2 without the extension: OPEN (after its first two bytes),
/// then ACQUIRE, RELEASE and PING until the end of input.
fn serve_v2(mut stream: TcpStream, seen: &Mutex<Seen>, tokens: &AtomicU64) -> std::io::Result<()> {
    read_exact(&mut stream, 4)?; // lease
    let mut opened = vec![0x30];
    opened.extend_from_slice(&1u64.to_be_bytes());
    opened.extend_from_slice(&1024u32.to_be_bytes());
    stream.write_all(&opened)?;
    let mut kind = [0u8; 1];
    while read_frame_part(&mut stream, &mut kind)? {
        match kind[0] {
            0x21 => {
                let fixed = read_exact(&mut stream, 6)?; // claim, mode, name_len
                read_exact(&mut stream, usize::from(fixed[5]))?;
                let token = tokens.fetch_add(1, Ordering::Relaxed);
                count(seen, |s| s.v2_grants += 1);
                let mut acquired = vec![0x31];
                acquired.extend_from_slice(&fixed[..4]);
                acquired.extend_from_slice(&token.to_be_bytes());
                stream.write_all(&acquired)?;
            }
            0x22 => {
                let claim = read_exact(&mut stream, 4)?;
                count(seen, |s| s.v2_releases += 1);
                let mut released = vec![0x34];
                released.extend_from_slice(&claim);
                stream.write_all(&released)?;
            }
            0x23 => stream.write_all(&[0x35])?,
            other => {
                if other == 0x24 {
                    count(seen, |s| s.hellos_refused += 1);
                } else if (0x25..=0x29).contains(&other) {
                    count(seen, |s| s.extension_frames_refused += 1);
                }
                return unknown_type(&mut stream, other);
            }
        }
    }
    stream.shutdown(std::net::Shutdown::Write)
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Read, Write},
        net::TcpStream,
        time::Duration,
    };

    use super::{OlderServer, Seen};

    fn connect(server: &OlderServer) -> TcpStream {
        let stream = TcpStream::connect(&server.address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream
    }

    fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        stream.read_exact(&mut buf).expect("a whole reply");
        buf
    }

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn hello_is_answered_as_the_server_before_the_extension_answered_it() {
        let server = OlderServer::start().expect("start");
        let mut stream = connect(&server);
        stream
            .write_all(&hex("0102000007d02400000001"))
            .expect("write");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("read to the close");
        // What `monolock serve` before the extension wrote, byte for byte:
        // OPENED (session 1, 1024 claims), then ERROR 0x13 "unknown
        // message type: 0x24", then the close.
        let before = "30000000000000000100000400\
                      13131a756e6b6e6f776e206d65737361676520747970653a2030783234";
        assert_eq!(answer, hex(before));
        assert_eq!(
            server.seen(),
            Seen {
                hellos_refused: 1,
                ..Seen::default()
            }
        );
    }

    #[test]
    fn a_plain_session_acquires_releases_and_pongs() {
        let server = OlderServer::start().expect("start");
        let mut stream = connect(&server);
        stream.write_all(&hex("0102000007d0")).expect("open");
        assert_eq!(read_n(&mut stream, 13)[0], 0x30);
        let acquire = hex("210000000700066465706c6f79");
        stream.write_all(&acquire).expect("acquire");
        let first = read_n(&mut stream, 13);
        stream.write_all(&acquire).expect("acquire again");
        let second = read_n(&mut stream, 13);
        assert_eq!(first[..5], hex("3100000007")[..]);
        assert!(second[5..] > first[5..], "tokens rise");
        stream.write_all(&hex("2200000007")).expect("release");
        assert_eq!(read_n(&mut stream, 5), hex("3400000007"));
        stream.write_all(&hex("23")).expect("ping");
        assert_eq!(read_n(&mut stream, 1), hex("35"));
        stream
            .write_all(&hex("2700000001066465706c6f79"))
            .expect("observe");
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).expect("read to the close");
        assert_eq!(rest[..2], [0x13, 0x13]);
        let seen = server.seen();
        assert_eq!((seen.v2_grants, seen.v2_releases), (2, 1));
        assert_eq!(seen.extension_frames_refused, 1);
    }
}
