//! The system calls `exec` and its sentinel make on processes: process
//! groups and their signals, the parent-death signal, the terminal's
//! foreground job, a new session, and PID namespaces. Every `unsafe` block
//! of the executable's process handling is here, each with the reason it
//! is sound.

use std::{
    io::{self, IsTerminal},
    os::fd::RawFd,
};

use tokio::process::Command;

/// Makes the kernel SIGKILL the command if this process dies first, and,
/// with `foreground`, makes the command's process group the terminal's
/// foreground job.
///
/// The claim is this process's connection: if `monolock exec` is killed
/// (even with SIGKILL, which it cannot catch), the server releases the lock
/// at once and may hand it on, so the command must not outlive it. The
/// parent-death signal fires when the thread that forked exits; this runtime
/// is current-thread, so that thread is the main thread, which lives as long
/// as the process. It reaches the command itself; the sentinel reaches the
/// rest of its process group.
#[allow(unsafe_code)]
pub fn die_with_parent(command: &mut Command, foreground: bool, namespaced: bool) {
    // Seen from inside a new PID namespace, a parent outside it has PID 0;
    // had it died, the child would belong to the namespace's init (1).
    let parent = if namespaced { 0 } else { std::process::id() };
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it makes system calls only
    // (prctl, getppid, signal, tcsetpgrp, getpgrp), allocates nothing and
    // takes no lock. std has already moved the child into its own process
    // group (setpgid) when closures run.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if foreground {
                // A background group may take the terminal only with
                // SIGTTOU ignored; the command gets the default back.
                libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                let taken = libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp());
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
                if taken != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Makes the command, once it leads its own process group and before it
/// runs anything, write that group's id (a decimal line) to `sentinel`,
/// the write end of the sentinel's pipe. Told by the command itself, the
/// sentinel guards the group from the first instruction the command runs:
/// an exec killed right after the fork still has its command's group
/// killed. The id is the one the command sees, which is also the one the
/// sentinel sees when both are in a new PID namespace.
///
/// A sentinel that is gone makes the spawn fail with `EPIPE`.
#[allow(unsafe_code)]
pub fn announce_group(command: &mut Command, sentinel: RawFd) {
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: getpgrp, signal and write, on a
    // stack buffer; it allocates nothing and takes no lock. `sentinel` is
    // open in the child (fork copies the descriptor table; the descriptor
    // is close-on-exec, so the command does not keep it). A line of at
    // most 12 bytes is below PIPE_BUF, so the pipe takes it whole or not
    // at all, and an empty pipe never refuses it for want of room.
    unsafe {
        command.pre_exec(move || {
            let mut line = [0u8; 12];
            let len = decimal_line(libc::getpgrp(), &mut line);
            // A broken pipe is an error to return, not a signal to die of.
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            let written = loop {
                let written = libc::write(sentinel, line.as_ptr().cast(), len);
                if written >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    break written;
                }
            };
            let failure = io::Error::last_os_error();
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            if usize::try_from(written).ok() != Some(len) {
                return Err(failure);
            }
            Ok(())
        });
    }
}

/// Writes `value` and a newline into `line`; returns the length. Digits
/// by hand: the caller is a forked child, where formatting machinery that
/// might allocate is off limits.
fn decimal_line(value: libc::pid_t, line: &mut [u8; 12]) -> usize {
    let mut digits = [0u8; 10];
    let mut rest = value.unsigned_abs();
    let mut count = 0;
    loop {
        digits[count] = b'0' + (rest % 10) as u8;
        count += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for (place, digit) in digits[..count].iter().rev().enumerate() {
        line[place] = *digit;
    }
    line[count] = b'\n';
    count + 1
}

/// The terminal exec runs in the foreground of, if any: the command gets
/// the foreground while it runs, and exec takes it back after.
pub struct Terminal {
    group: libc::pid_t,
}

impl Terminal {
    /// `Some` when stdin is a terminal whose foreground job is exec's
    /// process group (an interactive shell ran exec in the foreground).
    #[allow(unsafe_code)]
    pub fn foreground() -> Option<Self> {
        if !io::stdin().is_terminal() {
            return None;
        }
        // SAFETY: getpgrp and tcgetpgrp take integers and touch no memory
        // of this process.
        let (group, foreground) = unsafe { (libc::getpgrp(), libc::tcgetpgrp(libc::STDIN_FILENO)) };
        if group != foreground {
            return None;
        }
        // SAFETY: as above; ignoring SIGTTOU lets exec, no longer in the
        // foreground, take the terminal back after the command.
        unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
        Some(Self { group })
    }

    /// Makes exec's group the foreground job again.
    #[allow(unsafe_code)]
    pub fn take_back(&self) {
        // SAFETY: tcsetpgrp takes integers and touches no memory of this
        // process; failure (the terminal is gone) leaves nothing to do.
        unsafe { libc::tcsetpgrp(libc::STDIN_FILENO, self.group) };
    }
}

/// Sends `signal` to every process in group `group` (`kill(-group, signal)`).
#[allow(unsafe_code)]
pub fn signal_group(group: i32, signal: i32) -> io::Result<()> {
    // kill(-1) would signal every process we may signal: never let it happen.
    if group <= 1 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // SAFETY: kill(2) takes two integers and reads or writes no memory of
    // this process; any failure is reported through errno.
    if unsafe { libc::kill(-group, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether any process of the group is left (signal 0 probes).
pub fn group_alive(group: i32) -> bool {
    match signal_group(group, 0) {
        Ok(()) => true,
        Err(err) => err.raw_os_error() == Some(libc::EPERM),
    }
}

/// Puts every child this thread starts from now on into a new PID
/// namespace (the first one, the sentinel, becomes its init). Needs
/// CAP_SYS_ADMIN (root); user namespaces are not used, since they would
/// change what set-user-ID programs in the job can do.
#[allow(unsafe_code)]
pub fn enter_new_pid_namespace() -> io::Result<()> {
    // SAFETY: unshare(2) takes a flag word and touches no memory of this
    // process; CLONE_NEWPID changes only where later children are placed.
    if unsafe { libc::unshare(libc::CLONE_NEWPID) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A new session, and the terminal's signals ignored, before the sentinel
/// program starts (SIGCHLD too: see the module documentation).
#[allow(unsafe_code)]
pub fn detach(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: setsid(2) and signal(2) are, and
    // it allocates nothing and takes no lock. Ignored dispositions survive
    // exec, which is the point.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD] {
                if libc::signal(signal, libc::SIG_IGN) == libc::SIG_ERR {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_group_guard_refuses_all_processes() {
        assert!(signal_group(1, 0).is_err());
        assert!(signal_group(0, 0).is_err());
        assert!(signal_group(-5, 0).is_err());
    }

    #[test]
    fn group_ids_are_written_as_decimal_lines() {
        for value in [1, 7, 10, 4_194_304, i32::MAX] {
            let mut line = [0u8; 12];
            let len = decimal_line(value, &mut line);
            assert_eq!(&line[..len], format!("{value}\n").as_bytes());
        }
    }
}
