//! A minimal RESP2 client and the Redis lock recipe built on it.
//!
//! Hand-written on purpose instead of the `redis` crate: its async
//! connections route every command through a channel to a driver task (two
//! extra task wake-ups and an allocation per command). On a 2-core machine
//! with the generator pinned to one core, that overhead would be billed to
//! Redis and could make the generator, not Redis, the bottleneck. One
//! socket, one reusable write buffer and a read buffer per connection is the
//! cheapest honest client, so Redis gets its best showing.
//!
//! The lock recipe is the one from the Redis documentation: `SET key token
//! NX PX ttl` to acquire, a check-and-delete Lua script through EVALSHA to
//! release, and a check-and-`PEXPIRE` script to extend (the watchdog of
//! mature clients such as Redisson).

use std::{
    net::{Ipv4Addr, SocketAddr},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use rand::Rng;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// Release only if the key still holds our token.
pub const RELEASE_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// Extend the TTL only if the key still holds our token.
pub const EXTEND_SCRIPT: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:1`
    Int(i64),
    /// `$n` (None for the nil bulk `$-1`)
    Bulk(Option<Vec<u8>>),
    /// `*n` (None for the nil array)
    Array(Option<Vec<Reply>>),
}

/// Parses one reply at the start of `buf`: `Ok(None)` while incomplete.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>> {
    let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let Some((&kind, line)) = buf[..line_end].split_first() else {
        bail!("empty RESP line");
    };
    let line = std::str::from_utf8(line).context("RESP header is not UTF-8")?;
    let after = line_end + 2;
    match kind {
        b'+' => Ok(Some((Reply::Simple(line.to_owned()), after))),
        b'-' => Ok(Some((Reply::Error(line.to_owned()), after))),
        b':' => Ok(Some((Reply::Int(line.parse()?), after))),
        b'$' => {
            let len: i64 = line.parse()?;
            if len < 0 {
                return Ok(Some((Reply::Bulk(None), after)));
            }
            let len = usize::try_from(len)?;
            let end = after + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            Ok(Some((Reply::Bulk(Some(buf[after..end].to_vec())), end + 2)))
        }
        b'*' => {
            let count: i64 = line.parse()?;
            if count < 0 {
                return Ok(Some((Reply::Array(None), after)));
            }
            let mut items = Vec::new();
            let mut at = after;
            for _ in 0..count {
                let Some((item, used)) = parse_reply(&buf[at..])? else {
                    return Ok(None);
                };
                items.push(item);
                at += used;
            }
            Ok(Some((Reply::Array(Some(items)), at)))
        }
        other => bail!("unexpected RESP type byte 0x{other:02x}"),
    }
}

/// One Redis connection.
pub struct RespConn {
    stream: TcpStream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
}

impl RespConn {
    /// Connects with TCP_NODELAY.
    pub async fn connect(addr: SocketAddr) -> Result<Self> {
        Self::connect_from(addr, None).await
    }

    /// Connects with TCP_NODELAY, optionally from a chosen loopback source
    /// address (see [`crate::mono::connect`]).
    pub async fn connect_from(addr: SocketAddr, source: Option<Ipv4Addr>) -> Result<Self> {
        let stream: TcpStream = crate::mono::connect(addr, source)
            .await
            .with_context(|| format!("connect to redis at {addr}"))?;
        Ok(Self {
            stream,
            rbuf: Vec::with_capacity(256),
            wbuf: Vec::with_capacity(256),
        })
    }

    /// Sends one command and reads its reply. A `-ERR` reply is returned as
    /// [`Reply::Error`], not as an `Err`.
    pub async fn cmd(&mut self, args: &[&[u8]]) -> Result<Reply> {
        self.wbuf.clear();
        self.wbuf
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            self.wbuf
                .extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            self.wbuf.extend_from_slice(arg);
            self.wbuf.extend_from_slice(b"\r\n");
        }
        self.stream
            .write_all(&self.wbuf)
            .await
            .context("write to redis")?;
        loop {
            if let Some((reply, used)) = parse_reply(&self.rbuf)? {
                self.rbuf.drain(..used);
                return Ok(reply);
            }
            let n = self
                .stream
                .read_buf(&mut self.rbuf)
                .await
                .context("read from redis")?;
            if n == 0 {
                bail!("redis closed the connection");
            }
        }
    }

    /// `PING`, expecting `+PONG`.
    pub async fn ping(&mut self) -> Result<()> {
        match self.cmd(&[b"PING"]).await? {
            Reply::Simple(s) if s == "PONG" => Ok(()),
            other => bail!("PING answered {other:?}"),
        }
    }

    /// Loads a script; returns its SHA1 for EVALSHA.
    pub async fn script_load(&mut self, script: &str) -> Result<String> {
        match self.cmd(&[b"SCRIPT", b"LOAD", script.as_bytes()]).await? {
            Reply::Bulk(Some(sha)) => Ok(String::from_utf8(sha)?),
            other => bail!("SCRIPT LOAD answered {other:?}"),
        }
    }
}

/// A random value, unique per client and attempt, as the recipe requires.
pub fn new_token(rng: &mut impl Rng) -> String {
    format!("{:016x}{:016x}", rng.random::<u64>(), rng.random::<u64>())
}

/// A Redis lock client: one connection and the loaded scripts.
pub struct RedisLock {
    conn: RespConn,
    release_sha: String,
    extend_sha: String,
    ttl_ms: String,
}

impl RedisLock {
    /// Connects and loads the scripts; `ttl` is the PX of every SET.
    pub async fn connect(addr: SocketAddr, ttl: Duration) -> Result<Self> {
        let mut conn = RespConn::connect(addr).await?;
        let release_sha = conn.script_load(RELEASE_SCRIPT).await?;
        let extend_sha = conn.script_load(EXTEND_SCRIPT).await?;
        Ok(Self {
            conn,
            release_sha,
            extend_sha,
            ttl_ms: ttl.as_millis().to_string(),
        })
    }

    /// `SET key token NX PX ttl`: true if acquired.
    pub async fn try_acquire(&mut self, key: &str, token: &str) -> Result<bool> {
        let reply = self
            .conn
            .cmd(&[
                b"SET",
                key.as_bytes(),
                token.as_bytes(),
                b"NX",
                b"PX",
                self.ttl_ms.as_bytes(),
            ])
            .await?;
        match reply {
            Reply::Simple(s) if s == "OK" => Ok(true),
            Reply::Bulk(None) => Ok(false),
            other => bail!("SET NX PX answered {other:?}"),
        }
    }

    /// The check-and-delete script: true if our token was still there.
    pub async fn release(&mut self, key: &str, token: &str) -> Result<bool> {
        let reply = self
            .conn
            .cmd(&[
                b"EVALSHA",
                self.release_sha.as_bytes(),
                b"1",
                key.as_bytes(),
                token.as_bytes(),
            ])
            .await?;
        match reply {
            Reply::Int(n) => Ok(n == 1),
            other => bail!("release script answered {other:?}"),
        }
    }

    /// The check-and-PEXPIRE script (watchdog renewal): true if still ours.
    pub async fn extend(&mut self, key: &str, token: &str) -> Result<bool> {
        let reply = self
            .conn
            .cmd(&[
                b"EVALSHA",
                self.extend_sha.as_bytes(),
                b"1",
                key.as_bytes(),
                token.as_bytes(),
                self.ttl_ms.as_bytes(),
            ])
            .await?;
        match reply {
            Reply::Int(n) => Ok(n == 1),
            other => bail!("extend script answered {other:?}"),
        }
    }
}

/// A waiter's sleep between SET NX attempts: uniform in [delay/2, 3·delay/2]
/// (mean = delay), the jittered retry the Redis docs recommend.
pub fn jittered(delay: Duration, rng: &mut impl Rng) -> Duration {
    delay.mul_f64(rng.random_range(0.5..1.5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies_incrementally() {
        assert_eq!(
            parse_reply(b"+OK\r\n").unwrap(),
            Some((Reply::Simple("OK".into()), 5))
        );
        assert_eq!(parse_reply(b"+OK\r").unwrap(), None);
        assert_eq!(
            parse_reply(b"$-1\r\n").unwrap(),
            Some((Reply::Bulk(None), 5))
        );
        assert_eq!(parse_reply(b"$3\r\nabc").unwrap(), None);
        assert_eq!(
            parse_reply(b"$3\r\nabc\r\n:1\r\n").unwrap(),
            Some((Reply::Bulk(Some(b"abc".to_vec())), 9))
        );
        assert_eq!(parse_reply(b":-7\r\n").unwrap(), Some((Reply::Int(-7), 5)));
        assert_eq!(
            parse_reply(b"-NOSCRIPT x\r\n").unwrap(),
            Some((Reply::Error("NOSCRIPT x".into()), 13))
        );
        assert_eq!(
            parse_reply(b"*2\r\n:1\r\n$1\r\nz\r\n").unwrap(),
            Some((
                Reply::Array(Some(vec![Reply::Int(1), Reply::Bulk(Some(b"z".to_vec()))])),
                15
            ))
        );
        assert_eq!(parse_reply(b"*2\r\n:1\r\n").unwrap(), None);
        assert!(parse_reply(b"?x\r\n").is_err());
    }

    #[test]
    fn jitter_stays_in_range() {
        let mut rng = rand::rng();
        for _ in 0..1000 {
            let d = jittered(Duration::from_millis(10), &mut rng);
            assert!(d >= Duration::from_millis(5) && d < Duration::from_millis(15));
        }
    }
}
