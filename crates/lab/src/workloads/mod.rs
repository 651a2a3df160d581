//! Workloads from the journaling papers, written once against [`crate::Target`].

pub mod varmail;

use std::time::Duration;

use cjfs_blockdev::DeviceStats;
use cjfs_journal::StatsSnapshot;
use serde::Serialize;

use crate::hist::Percentiles;

/// What one run of a workload measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Workload name.
    pub workload: String,
    /// Threads.
    pub threads: usize,
    /// Operations completed (filebench-style flowops).
    pub ops: u64,
    /// Wall time.
    pub secs: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Latency of every operation.
    pub op_latency: Percentiles,
    /// Latency of fsync calls.
    pub fsync_latency: Percentiles,
    /// CPU time (user + system) of the process during the run, seconds.
    pub cpu_secs: f64,
    /// Journal statistics over the run (cjfs targets).
    #[serde(skip)]
    pub journal: Option<StatsSnapshot>,
    /// Device statistics over the run (cjfs targets).
    #[serde(skip)]
    pub device: Option<DeviceStats>,
}

/// Process CPU time (user + system).
pub fn cpu_time() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A buffer of pseudo-random bytes to write from (so compressing devices gain nothing).
pub fn data_pool() -> &'static [u8] {
    static POOL: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..(2 << 20))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    })
}
