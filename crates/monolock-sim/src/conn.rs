//! The faults of one simulated connection, shared by its two ends (a
//! reset of one end or both, a direction held back, the server's send
//! window), apart from the streams that obey them (`stream.rs`) and the lab
//! that keeps them by address (`lab.rs`).

use std::{
    io,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::{Context, Waker},
};

pub(crate) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which end of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Client,
    Server,
}

#[derive(Default)]
struct ConnState {
    reset: [bool; 2],
    /// What an end writes is held back (one direction of the link stalls,
    /// TCP keeps the bytes and delivers them, in order, when it heals).
    held: [bool; 2],
    wakers: [Option<Waker>; 2],
    open: [bool; 2],
    /// The most bytes the server end may have written that the client end
    /// has not read (`None`: unbounded).
    window: Option<usize>,
    /// Bytes the server end wrote (held back or sent) that the client end
    /// has not read. Bytes a partition dropped stay counted, as a real
    /// sender's unacknowledged bytes stay in its buffer.
    unread_by_client: usize,
    /// The server's write waiting for room.
    window_waker: Option<Waker>,
}

/// The faults of one connection, shared by its two ends.
#[derive(Clone, Default)]
pub(crate) struct Conn(Arc<Mutex<ConnState>>);

const fn index(end: End) -> usize {
    match end {
        End::Client => 0,
        End::Server => 1,
    }
}

impl Conn {
    /// Resets `end`: its next (or pending) read or write fails with
    /// `ConnectionReset`, as after an RST.
    pub(crate) fn reset(&self, end: End) {
        let wakers = {
            let mut state = locked(&self.0);
            state.reset[index(end)] = true;
            let window = if end == End::Server {
                state.window_waker.take()
            } else {
                None
            };
            [state.wakers[index(end)].take(), window]
        };
        wakers.into_iter().flatten().for_each(Waker::wake);
    }

    /// Holds back, or lets go, what `end` writes.
    pub(crate) fn hold(&self, end: End, held: bool) {
        let waker = {
            let mut state = locked(&self.0);
            state.held[index(end)] = held;
            state.wakers[index(end)].take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub(crate) fn is_held(&self, end: End) -> bool {
        locked(&self.0).held[index(end)]
    }

    /// Whether both ends have been dropped.
    pub(crate) fn closed(&self) -> bool {
        let state = locked(&self.0);
        !state.open[0] && !state.open[1]
    }

    pub(crate) fn check(&self, end: End, cx: &Context<'_>) -> io::Result<()> {
        let mut state = locked(&self.0);
        if state.reset[index(end)] {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        state.wakers[index(end)] = Some(cx.waker().clone());
        Ok(())
    }

    pub(crate) fn set_open(&self, end: End, open: bool) {
        let waker = {
            let mut state = locked(&self.0);
            state.open[index(end)] = open;
            // A server write waiting for room goes on (and fails, or is
            // lost) once the client end is gone.
            if open {
                None
            } else {
                state.window_waker.take()
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Bounds what the server end may write ahead of the client's reads.
    pub(crate) fn set_window(&self, window: Option<usize>) {
        locked(&self.0).window = window;
    }

    /// How many bytes `end` may write now (`None`: no bound). At none,
    /// the writer is woken when the client reads.
    pub(crate) fn room(&self, end: End, cx: &Context<'_>) -> Option<usize> {
        let mut state = locked(&self.0);
        let window = state.window?;
        if end != End::Server || state.reset[index(end)] || !state.open[index(End::Client)] {
            return None;
        }
        let room = window.saturating_sub(state.unread_by_client);
        if room == 0 {
            state.window_waker = Some(cx.waker().clone());
        }
        Some(room)
    }

    /// `end` wrote `n` bytes.
    pub(crate) fn wrote(&self, end: End, n: usize) {
        if end == End::Server {
            locked(&self.0).unread_by_client += n;
        }
    }

    /// `end` read `n` bytes: room for the server's writes.
    pub(crate) fn read(&self, end: End, n: usize) {
        if end != End::Client || n == 0 {
            return;
        }
        let waker = {
            let mut state = locked(&self.0);
            state.unread_by_client = state.unread_by_client.saturating_sub(n);
            state.window_waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}
