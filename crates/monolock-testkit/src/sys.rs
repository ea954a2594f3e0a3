//! The few system calls the tests, the bench and the fault suite make
//! around processes and CPUs, written once: signals, `/proc` states, CPU
//! pinning, CPU time, the descriptor limit.
#![allow(unsafe_code)] // each call below carries its own SAFETY argument

use std::{
    io::{self, ErrorKind},
    os::unix::process::CommandExt,
    process::Command,
    time::Duration,
};

/// Sends `signal` to process `pid`.
///
/// # Errors
/// A pid that does not fit `pid_t`, or the OS error of kill(2).
pub fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether process `pid` still exists (a zombie counts): kill(2) with
/// signal 0, which only probes.
pub fn exists(pid: u32) -> bool {
    send_signal(pid, 0).is_ok()
}

/// The state letter of process `pid` from `/proc/PID/stat` (`T` when
/// stopped, `Z` a zombie); `None` once it is gone.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

/// Waits, blocking the thread, until process `pid` is stopped (state `T`,
/// as after a delivered SIGSTOP), at most `limit`; false if it never was.
/// The kernel tells no one but the parent, so this polls `/proc` every
/// millisecond, bounded.
pub fn wait_until_stopped(pid: u32, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if matches!(process_state(pid), Some('T' | 't')) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Online CPUs of the machine (not of this process's affinity mask).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Restricts the calling thread to one CPU; threads and processes it starts
/// afterwards inherit the mask.
///
/// # Errors
/// A CPU index out of range, or the OS error of sched_setaffinity(2).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "cpu index out of range",
        ));
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set, CPU_SET writes inside
    // it (the index was checked above), and sched_setaffinity only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes a child process start pinned to `cpu` (set between fork and exec,
/// so every thread the child ever creates inherits it).
pub fn pin_command(cmd: &mut Command, cpu: usize) {
    // SAFETY: the closure only calls sched_setaffinity, which is
    // async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || pin_current_thread(cpu));
    }
}

/// CPU time (user + system) this process has used so far, all threads.
pub fn own_cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is valid; getrusage writes into it.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u64::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(micros)
}

/// Raises the soft descriptor limit to the hard limit; returns the new
/// soft limit.
///
/// # Errors
/// The OS error of getrlimit(2) or setrlimit(2).
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(lim.rlim_cur)
}
