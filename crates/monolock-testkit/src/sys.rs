//! The system calls and `/proc` readers the tests, the bench and the
//! fault suite share, written once: signals, child set-up between fork and
//! exec, CPU pinning and priorities, CPU time, the descriptor limit, socket
//! options, and what `/proc` says of a process, its sockets and the machine.
#![allow(unsafe_code)] // each call below carries its own SAFETY argument

use std::{
    fs,
    io::{self, ErrorKind},
    net::Ipv4Addr,
    os::{fd::AsRawFd, unix::process::CommandExt},
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

/// Has the kernel SIGKILL the child when the thread that started it ends
/// (with its process, as a harness killed mid-run), so that nothing it
/// started keeps running. Set between fork and exec.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls prctl(2), which is async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes a child start with both its soft and hard descriptor limits at
/// `limit` (set between fork and exec): a child that raises its soft limit
/// to the hard one, as the server does, still has only `limit`.
pub fn limit_nofile_in_child(cmd: &mut Command, limit: u64) {
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls setrlimit(2), which is async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sets the calling thread's nice value; threads and processes it starts
/// afterwards inherit it. Lowering it below 0 needs privileges.
///
/// # Errors
/// The OS error of setpriority(2).
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
///
/// # Errors
/// The OS error of sched_setscheduler(2).
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
///
/// # Errors
/// The OS error of setsockopt(2) or bind(2).
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

/// Reads the CPU time and the resident memory of process `pid`
/// (`/proc/PID/stat`, its CPU-time clock where the kernel allows it, and
/// `/proc/PID/status`).
///
/// # Errors
/// A file that cannot be read (the process is gone), or a malformed stat.
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
    Ok(ProcSample {
        cpu,
        rss_bytes: status_kib(&status, "VmRSS:").unwrap_or(0) * 1024,
    })
}

/// The resident memory of process `pid` in bytes (`VmRSS` of
/// `/proc/PID/status`); `None` once it is gone (or has no memory of its
/// own, as a zombie).
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(status_kib(&status, "VmRSS:")? * 1024)
}

/// A `NAME:   123 kB` field of a `/proc` status or meminfo file, in KiB.
fn status_kib(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Kernel slab memory of the whole machine, in bytes (`/proc/meminfo`
/// "Slab:"). Socket, file and TCP control structures live there, outside
/// every process's RSS. Machine-wide, so other activity adds noise.
pub fn kernel_slab_bytes() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    Some(status_kib(&text, "Slab:")? * 1024)
}

/// Whether this process runs as root (real uid 0, from
/// `/proc/self/status`); false if that cannot be read.
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .is_some_and(|ids| ids.split_whitespace().next() == Some("0"))
    })
}

/// The children of process `pid` (of its main thread, from
/// `/proc/PID/task/PID/children`); empty once it is gone.
pub fn children(pid: u32) -> Vec<u32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|text| {
            text.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The command line of process `pid` as `ps` shows it, arguments joined
/// by spaces (`/proc/PID/cmdline`); `None` once it is gone.
pub fn command_line(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(String::from_utf8_lossy(&raw).replace('\0', " "))
}

/// How many descriptors process `pid` has open (`/proc/PID/fd`); for this
/// process itself, not counting the one the listing opens.
///
/// # Errors
/// The directory cannot be listed (the process is gone, or not ours).
pub fn open_descriptors(pid: u32) -> io::Result<u64> {
    let listed = fs::read_dir(format!("/proc/{pid}/fd"))?.count();
    let own_listing = usize::from(pid == std::process::id());
    Ok(u64::try_from(listed.saturating_sub(own_listing)).unwrap_or(u64::MAX))
}

/// How many threads process `pid` has (`Threads:` of `/proc/PID/status`).
///
/// # Errors
/// The file cannot be read (the process is gone), or has no such line.
pub fn thread_count(pid: u32) -> io::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| io::Error::new(ErrorKind::InvalidData, "no Threads line in its status"))
}

/// CPU time (user + system) of this process's threads whose name `keep`
/// accepts, summed from `/proc/self/task/*/stat` (the kernel keeps a
/// thread's first 15 bytes of name; clock ticks, 10 ms each on Linux).
pub fn threads_cpu_time(keep: impl Fn(&str) -> bool) -> Duration {
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let ticks: u64 = tasks
        .flatten()
        .filter_map(|task| {
            let stat = fs::read_to_string(task.path().join("stat")).ok()?;
            // The name is in parentheses and may hold spaces.
            let (head, rest) = stat.rsplit_once(')')?;
            let (_, name) = head.split_once('(')?;
            if !keep(name) {
                return None;
            }
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the line, 12 and 13 after ")".
            let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            Some(tick(11)? + tick(12)?)
        })
        .sum();
    ticks_to_duration(ticks)
}

/// Busy time of all the machine's CPUs so far: the first line of
/// `/proc/stat` (clock ticks) less idle and iowait; zero if unreadable.
pub fn machine_busy_time() -> Duration {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat.lines().next().map_or(Vec::new(), |line| {
        line.split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect()
    });
    // user nice system idle iowait irq softirq steal (guest is within user)
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    ticks_to_duration(busy)
}

fn ticks_to_duration(ticks: u64) -> Duration {
    let hz = clock_ticks_per_sec();
    Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz)
}

/// The machine's CPU model (the first `model name` of `/proc/cpuinfo`).
pub fn cpu_model() -> Option<String> {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").ok()?;
    cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|line| line.trim_start_matches([' ', '\t', ':']).to_owned())
}

/// The running kernel's release (`/proc/sys/kernel/osrelease`).
pub fn kernel_release() -> Option<String> {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(release.trim().to_owned())
}

/// The load averages over 1, 5 and 15 minutes as `/proc/loadavg` gives
/// them, e.g. `0.52 0.61 0.70`.
pub fn load_average() -> Option<String> {
    let load = fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// TCP state `ESTABLISHED` in [`TcpSocket::state`].
pub const TCP_ESTABLISHED: u8 = 0x01;
/// TCP state `LISTEN` in [`TcpSocket::state`].
pub const TCP_LISTEN: u8 = 0x0A;

/// One IPv4 TCP socket of this network namespace, a row of
/// `/proc/net/tcp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSocket {
    /// The local port.
    pub local_port: u16,
    /// The remote port (0 for a listener).
    pub remote_port: u16,
    /// The kernel's TCP state ([`TCP_ESTABLISHED`], [`TCP_LISTEN`], ...).
    pub state: u8,
    /// The socket's inode, as `/proc/PID/fd` names it (`socket:[INODE]`).
    pub inode: u64,
}

/// Every IPv4 TCP socket of this network namespace (`/proc/net/tcp`);
/// empty if it cannot be read.
pub fn tcp_sockets() -> Vec<TcpSocket> {
    let table = fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).filter_map(tcp_socket).collect()
}

/// One row of `/proc/net/tcp`: `sl local rem st ... inode ...`, the
/// addresses as `HEXIP:HEXPORT`.
fn tcp_socket(row: &str) -> Option<TcpSocket> {
    let fields: Vec<&str> = row.split_whitespace().collect();
    let port = |field: &str| u16::from_str_radix(field.rsplit(':').next()?, 16).ok();
    Some(TcpSocket {
        local_port: port(fields.get(1)?)?,
        remote_port: port(fields.get(2)?)?,
        state: u8::from_str_radix(fields.get(3)?, 16).ok()?,
        inode: fields.get(9)?.parse().ok()?,
    })
}

/// The inodes of the sockets process `pid` has open (`/proc/PID/fd`);
/// empty once it is gone.
pub fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// The IPv4 TCP ports process `pid` listens on, in the order it created
/// the listeners (their inodes grow).
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes = socket_inodes(pid);
    let mut found: Vec<(u64, u16)> = tcp_sockets()
        .into_iter()
        .filter(|socket| socket.state == TCP_LISTEN && inodes.contains(&socket.inode))
        .map(|socket| (socket.inode, socket.local_port))
        .collect();
    found.sort_unstable();
    found.into_iter().map(|(_, port)| port).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_from_proc() {
        let me = std::process::id();
        assert!(matches!(process_state(me), Some('R' | 'S')));
        assert!(resident_bytes(me).is_some_and(|bytes| bytes > 0));
        assert!(proc_sample(me).is_ok_and(|sample| sample.rss_bytes > 0));
        assert!(command_line(me).is_some_and(|line| !line.is_empty()));
        assert!(thread_count(me).is_ok_and(|threads| threads >= 1));
    }

    #[test]
    fn counts_a_descriptor_this_process_opens() {
        let me = std::process::id();
        let before = open_descriptors(me).expect("list own descriptors");
        let listeners: Vec<_> = (0..50)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let during = open_descriptors(me).expect("list own descriptors");
        drop(listeners);
        // Tests running beside this one open and close a few of their own.
        assert!(during >= before + 40, "{before} then {during}");
        assert!(open_descriptors(u32::MAX).is_err());
    }

    #[test]
    fn reads_the_machine() {
        assert!(load_average().is_some_and(|load| load.split(' ').count() == 3));
        assert!(kernel_release().is_some_and(|release| !release.is_empty()));
        let busy = machine_busy_time();
        let spin = std::time::Instant::now();
        while machine_busy_time() == busy && spin.elapsed() < Duration::from_secs(10) {
            std::hint::black_box(spin.elapsed());
        }
        assert!(machine_busy_time() > busy, "the CPUs' busy time advances");
    }

    #[test]
    fn finds_its_own_listener_and_connection_in_proc_net_tcp() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        assert!(listening_ports(std::process::id()).contains(&port));
        assert!(
            tcp_sockets()
                .iter()
                .any(|socket| socket.remote_port == port && socket.state == TCP_ESTABLISHED)
        );
    }

    #[test]
    fn parses_a_row_of_proc_net_tcp() {
        let row = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 \
                   00000000  1000        0 123456 1 0000000000000000 100 0 0 10 0";
        assert_eq!(
            tcp_socket(row),
            Some(TcpSocket {
                local_port: 8080,
                remote_port: 0,
                state: TCP_LISTEN,
                inode: 123_456,
            })
        );
    }
}
