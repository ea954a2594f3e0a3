//! The process figures, read from `/proc/self` at scrape time.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
};

/// Process figures read from `/proc/self` at scrape time, under the names
/// the Prometheus client libraries use.
#[derive(Debug)]
pub(super) struct ProcessCollector {
    ticks_per_second: f64,
    page_size: f64,
    start_time_seconds: f64,
}

impl ProcessCollector {
    pub(super) fn new() -> Self {
        Self {
            ticks_per_second: sysconf(libc::_SC_CLK_TCK).unwrap_or(100.0),
            page_size: sysconf(libc::_SC_PAGESIZE).unwrap_or(4096.0),
            start_time_seconds: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}

#[allow(unsafe_code)]
fn sysconf(name: libc::c_int) -> Option<f64> {
    // SAFETY: sysconf takes an integer and returns an integer; it touches no
    // memory of ours.
    let value = unsafe { libc::sysconf(name) };
    (value > 0).then_some(value as f64)
}

/// `utime + stime` (in ticks) and resident pages from `/proc/self/stat`.
fn read_stat() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may contain spaces; fields after it are
    // plain numbers. Counting from field 3 (state): utime is field 14,
    // stime 15, rss 24.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let rss: f64 = fields.get(21)?.parse().ok()?;
    Some((utime + stime, rss))
}

fn open_fds() -> Option<usize> {
    // The listing itself holds one descriptor while it runs; leave it out.
    Some(
        std::fs::read_dir("/proc/self/fd")
            .ok()?
            .count()
            .saturating_sub(1),
    )
}

fn max_fds() -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some((ticks, rss_pages)) = read_stat() {
            let cpu = ConstCounter::new(ticks / self.ticks_per_second);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                MetricType::Counter,
            )?;
            cpu.encode(metric)?;
            let rss = ConstGauge::new(rss_pages * self.page_size);
            let metric = encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                None,
                MetricType::Gauge,
            )?;
            rss.encode(metric)?;
        }
        if let Some(fds) = open_fds() {
            let fds = ConstGauge::new(i64::try_from(fds).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                MetricType::Gauge,
            )?;
            fds.encode(metric)?;
        }
        if let Some(max) = max_fds() {
            let metric = encoder.encode_descriptor(
                "process_max_fds",
                "Maximum number of open file descriptors (soft limit).",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(max).encode(metric)?;
        }
        let metric = encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.start_time_seconds).encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_figures_are_read() {
        assert!(read_stat().is_some());
        assert!(open_fds().unwrap() >= 3);
        assert!(max_fds().unwrap() >= 1.0);
    }
}
