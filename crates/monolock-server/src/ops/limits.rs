//! Process limits the server adjusts at startup.

use std::io;

/// Raises the soft RLIMIT_NOFILE to the hard limit (one session is one
/// descriptor). Returns the `(before, after)` soft limits.
///
/// # Errors
/// The OS error if the limit cannot be read or set.
#[allow(unsafe_code)]
pub fn raise_fd_limit() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, exclusively borrowed rlimit for the whole
    // call; getrlimit only writes into it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: `limit` is a valid rlimit read just above; setrlimit only
        // reads it.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, limit.rlim_cur))
}
