//! The few operating-system calls the bench needs that std does not offer:
//! priorities, socket options and process figures from `/proc`. Every
//! `unsafe` block of the crate lives here; CPU affinity, signals, CPU time
//! and the descriptor limit are the testkit's, shared with the tests and
//! the fault suite.

use std::{
    fs,
    io::{self, ErrorKind},
    net::Ipv4Addr,
    os::fd::AsRawFd,
    time::Duration,
};

pub use monolock_testkit::sys::{
    online_cpus, own_cpu_time, pin_command, pin_current_thread, raise_nofile_limit, send_signal,
};

/// Sets the calling thread's nice value; threads and processes it starts
/// afterwards inherit it. Lowering it below 0 needs privileges.
pub fn set_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority has no memory-safety preconditions; who = 0 is
    // the calling thread on Linux.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Switches the calling thread to SCHED_FIFO at `priority`; threads and
/// processes it starts afterwards inherit it. Needs privileges.
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads the param struct we own; pid 0 is the
    // calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds `socket` to `ip` with the port chosen only at connect time
/// (IP_BIND_ADDRESS_NO_PORT), so each source address has its own
/// ephemeral-port space per destination.
pub fn bind_source_ip(socket: &socket2::Socket, ip: Ipv4Addr) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: the fd is open (we hold the socket) and the option value is a
    // c_int that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    socket.bind(&std::net::SocketAddr::new(ip.into(), 0).into())
}

fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// The CPU time of process `pid` (all its threads, living and exited) to
/// the nanosecond, from its CPU-time clock; `None` if the kernel refuses.
/// `/proc/PID/stat` counts in clock ticks (10 ms), too coarse for the
/// microseconds per cycle of a one-second throughput window.
fn process_cpu_clock(pid: u32) -> Option<Duration> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid, writable clockid_t for the call's duration.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// A process's resource figures at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcSample {
    /// User + system CPU of all its threads, living and exited.
    pub cpu: Duration,
    /// Resident set size in bytes.
    pub rss_bytes: u64,
}

/// Reads `/proc/PID/stat` (CPU) and `/proc/PID/status` (VmRSS).
pub fn proc_sample(pid: u32) -> io::Result<ProcSample> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may contain spaces and parentheses: fields are
    // counted from the last ')'. After it: state(3) ... utime(14) stime(15).
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| io::Error::new(ErrorKind::InvalidData, "malformed stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> io::Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(|| io::Error::new(ErrorKind::InvalidData, "malformed stat field"))
    };
    let total_ticks = ticks(11)? + ticks(12)?;
    let hz = clock_ticks_per_sec();
    let cpu = process_cpu_clock(pid).unwrap_or_else(|| {
        Duration::from_secs(total_ticks / hz)
            + Duration::from_nanos((total_ticks % hz) * 1_000_000_000 / hz)
    });

    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    Ok(ProcSample {
        cpu,
        rss_bytes: rss_kib * 1024,
    })
}

/// Kernel slab memory of the whole machine, in bytes (`/proc/meminfo`
/// "Slab:"). Socket, file and TCP control structures live there, outside
/// every process's RSS. Machine-wide, so other activity adds noise.
pub fn kernel_slab_bytes() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Slab:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}
