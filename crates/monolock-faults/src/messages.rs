//! What a worker tells the checker, one JSON object per line.
//!
//! Workers are separate processes (so that they can be killed and paused
//! for real), so they report over a loopback TCP connection to the checker
//! in the test process: their belief intervals, and their writes to the
//! fenced resource, which the checker answers.

use serde::{Deserialize, Serialize};

/// A message from a worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerMsg {
    /// First line on the connection.
    Hello {
        /// The worker's name (unique in a run).
        worker: String,
        /// Its process id.
        pid: u32,
    },
    /// `acquire` returned a guard: the belief starts.
    Held {
        /// The lock.
        lock: String,
        /// The token of the grant.
        token: u64,
        /// CLOCK_MONOTONIC when `acquire` returned.
        from_ns: u64,
    },
    /// A write to the fenced resource; answered with a [`WriteReply`].
    Write {
        /// The lock the writer holds.
        lock: String,
        /// Its token.
        token: u64,
        /// The writer's sequence number.
        seq: u64,
        /// CLOCK_MONOTONIC when sent.
        sent_ns: u64,
    },
    /// The belief ended.
    Lost {
        /// The lock.
        lock: String,
        /// The token that is no longer held.
        token: u64,
        /// End of the belief: `min(detected_ns, deadline_ns)`.
        until_ns: u64,
        /// When the worker saw the loss (the client reported it, or a
        /// deliberate release).
        detected_ns: u64,
        /// The client's deadline (`S + 0.8 x lease`) as the client knew it
        /// when the loss was seen.
        deadline_ns: u64,
        /// The client's reason, or `released`.
        reason: String,
    },
    /// The worker checked `is_held()` (true) and is about to stop itself
    /// with SIGSTOP before sending the write that check allowed.
    Pausing {
        /// The lock.
        lock: String,
        /// The token it believed it held.
        token: u64,
    },
    /// The worker was resumed after [`WorkerMsg::Pausing`] and sent its
    /// in-flight write.
    Resumed {
        /// The lock.
        lock: String,
        /// The old token.
        token: u64,
        /// What `is_held()` said right after the resume.
        held_after_resume: bool,
        /// Whether the resource accepted the in-flight write.
        write_accepted: bool,
    },
    /// `acquire` failed; the worker will try again.
    AcquireFailed {
        /// The lock.
        lock: String,
        /// The client's error.
        error: String,
    },
}

/// The checker's answer to [`WorkerMsg::Write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteReply {
    /// Whether the fenced resource accepted the write.
    pub accepted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_tagged_json_lines() {
        let msg = WorkerMsg::Held {
            lock: "l".into(),
            token: 7,
            from_ns: 9,
        };
        let line = serde_json::to_string(&msg).unwrap();
        assert_eq!(line, r#"{"type":"held","lock":"l","token":7,"from_ns":9}"#);
        assert_eq!(serde_json::from_str::<WorkerMsg>(&line).unwrap(), msg);
    }
}
