//! Operation counters every device embeds, and their plain snapshot.
//!
//! # In-flight writes
//!
//! A write is *in flight* from its submission until it completes. How a device learns
//! about completion differs:
//!
//! * [`crate::FileDevice`] completes writes on its own threads, so it calls
//!   [`Counters::write_submitted`] and [`Counters::write_completed`] around each write.
//! * [`crate::EmulatedSsd`] completes a write at its ticket's deadline; nobody runs at that
//!   instant, so the device keeps the pending deadlines in a min-heap, drops the ones that
//!   have passed whenever it submits or reports stats, and publishes the count with
//!   [`Counters::sample_inflight`] / [`Counters::set_inflight_now`]. This is exact, costs
//!   `O(log n)` per write, and does not depend on whether anyone waits for the ticket.
//!
//! # Mean queue depth
//!
//! `inflight_mean` is a **sample-at-submit** mean: every submitted write samples the number
//! of writes in flight including itself, and the mean is `inflight_sum / inflight_samples`.
//! It is the queue depth an arriving write sees (1.0 for strictly synchronous QD1 I/O), not
//! a time-weighted average; idle periods do not lower it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Atomic counters a device updates as it works. Lock-free: every field is an atomic
/// updated with relaxed ordering (they are statistics, not synchronisation).
#[derive(Debug, Default)]
pub struct Counters {
    // No lock: all fields are independent atomics.
    writes: AtomicU64,
    blocks_written: AtomicU64,
    bytes_written: AtomicU64,
    reads: AtomicU64,
    blocks_read: AtomicU64,
    flushes: AtomicU64,
    barriers: AtomicU64,
    fua_writes: AtomicU64,
    inflight_now: AtomicU64,
    inflight_max: AtomicU64,
    inflight_sum: AtomicU64,
    inflight_samples: AtomicU64,
}

impl Counters {
    /// Fresh counters, all zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count a submitted write request of `nblocks` blocks of `block_size` bytes (FUA or not). Does not touch the
    /// in-flight figures; see [`Counters::write_submitted`] and [`Counters::sample_inflight`].
    pub fn record_write(&self, nblocks: u64, block_size: usize, fua: bool) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.blocks_written.fetch_add(nblocks, Ordering::Relaxed);
        self.bytes_written.fetch_add(nblocks * block_size as u64, Ordering::Relaxed);
        if fua {
            self.fua_writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Count a read request of `nblocks` blocks.
    pub fn record_read(&self, nblocks: u64) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.blocks_read.fetch_add(nblocks, Ordering::Relaxed);
    }

    /// Count a flush (successful or not).
    pub fn record_flush(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a barrier.
    pub fn record_barrier(&self) {
        self.barriers.fetch_add(1, Ordering::Relaxed);
    }

    /// A write entered flight (devices that learn about completion): increments the
    /// in-flight count, samples it for the mean and returns the new count.
    pub fn write_submitted(&self) -> u64 {
        let n = self.inflight_now.fetch_add(1, Ordering::Relaxed) + 1;
        self.sample(n);
        n
    }

    /// A write left flight (pairs with [`Counters::write_submitted`]). Saturates at zero.
    pub fn write_completed(&self) {
        let _ = self
            .inflight_now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(1)));
    }

    /// A write was submitted and `n` writes (including it) are now in flight (devices that
    /// track in-flight writes themselves): sets the current count and samples it.
    pub fn sample_inflight(&self, n: u64) {
        self.inflight_now.store(n, Ordering::Relaxed);
        self.sample(n);
    }

    /// Set the current in-flight count without sampling (used when reporting stats).
    pub fn set_inflight_now(&self, n: u64) {
        self.inflight_now.store(n, Ordering::Relaxed);
    }

    fn sample(&self, n: u64) {
        self.inflight_max.fetch_max(n, Ordering::Relaxed);
        self.inflight_sum.fetch_add(n, Ordering::Relaxed);
        self.inflight_samples.fetch_add(1, Ordering::Relaxed);
    }

    /// A consistent-enough snapshot (each field is read atomically, not all together).
    pub fn snapshot(&self) -> DeviceStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let inflight_sum = l(&self.inflight_sum);
        let inflight_samples = l(&self.inflight_samples);
        DeviceStats {
            writes: l(&self.writes),
            blocks_written: l(&self.blocks_written),
            bytes_written: l(&self.bytes_written),
            reads: l(&self.reads),
            blocks_read: l(&self.blocks_read),
            flushes: l(&self.flushes),
            barriers: l(&self.barriers),
            fua_writes: l(&self.fua_writes),
            inflight_now: l(&self.inflight_now),
            inflight_max: l(&self.inflight_max),
            inflight_mean: mean(inflight_sum, inflight_samples),
            inflight_sum,
            inflight_samples,
        }
    }
}

fn mean(sum: u64, samples: u64) -> f64 {
    if samples == 0 { 0.0 } else { sum as f64 / samples as f64 }
}

/// A plain snapshot of a device's [`Counters`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceStats {
    /// Write requests submitted (a multi-block request counts once).
    pub writes: u64,
    /// Blocks written.
    pub blocks_written: u64,
    /// Bytes written (`blocks_written` times the block size).
    pub bytes_written: u64,
    /// Read requests.
    pub reads: u64,
    /// Blocks read.
    pub blocks_read: u64,
    /// Flushes issued (successful or not).
    pub flushes: u64,
    /// Barriers issued.
    pub barriers: u64,
    /// FUA write requests (also counted in `writes`).
    pub fua_writes: u64,
    /// Writes in flight when the snapshot was taken.
    pub inflight_now: u64,
    /// Most writes ever in flight at once (since creation; [`DeviceStats::delta`] keeps it).
    pub inflight_max: u64,
    /// Sample-at-submit mean of writes in flight (each submitted write samples the count
    /// including itself): `inflight_sum / inflight_samples`, 0 when nothing was written.
    pub inflight_mean: f64,
    /// Sum of the in-flight samples (lets [`DeviceStats::delta`] compute an interval mean).
    pub inflight_sum: u64,
    /// Number of in-flight samples (one per submitted write).
    pub inflight_samples: u64,
}

impl DeviceStats {
    /// Counters for the interval from `earlier` to `self`: every count is the difference,
    /// `inflight_mean` is the mean over the interval's samples, and the instantaneous
    /// figures `inflight_now` and `inflight_max` are taken from `self` (a maximum over an
    /// interval cannot be derived from two snapshots).
    pub fn delta(&self, earlier: &DeviceStats) -> DeviceStats {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let inflight_sum = d(self.inflight_sum, earlier.inflight_sum);
        let inflight_samples = d(self.inflight_samples, earlier.inflight_samples);
        DeviceStats {
            writes: d(self.writes, earlier.writes),
            blocks_written: d(self.blocks_written, earlier.blocks_written),
            bytes_written: d(self.bytes_written, earlier.bytes_written),
            reads: d(self.reads, earlier.reads),
            blocks_read: d(self.blocks_read, earlier.blocks_read),
            flushes: d(self.flushes, earlier.flushes),
            barriers: d(self.barriers, earlier.barriers),
            fua_writes: d(self.fua_writes, earlier.fua_writes),
            inflight_now: self.inflight_now,
            inflight_max: self.inflight_max,
            inflight_mean: mean(inflight_sum, inflight_samples),
            inflight_sum,
            inflight_samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_delta() {
        let c = Counters::new();
        c.record_write(2, 4096, false);
        assert_eq!(c.write_submitted(), 1);
        assert_eq!(c.write_submitted(), 2);
        c.write_completed();
        c.write_completed();
        c.write_completed(); // saturates
        let a = c.snapshot();
        assert_eq!(a.writes, 1);
        assert_eq!(a.blocks_written, 2);
        assert_eq!(a.bytes_written, 2 * 4096);
        assert_eq!(a.inflight_now, 0);
        assert_eq!(a.inflight_max, 2);
        assert!((a.inflight_mean - 1.5).abs() < 1e-9);

        c.record_write(1, 4096, true);
        c.sample_inflight(4);
        c.record_read(3);
        c.record_flush();
        c.record_barrier();
        let b = c.snapshot();
        let d = b.delta(&a);
        assert_eq!(d.writes, 1);
        assert_eq!(d.fua_writes, 1);
        assert_eq!(d.blocks_read, 3);
        assert_eq!(d.reads, 1);
        assert_eq!(d.flushes, 1);
        assert_eq!(d.barriers, 1);
        assert_eq!(d.inflight_now, 4);
        assert_eq!(d.inflight_max, 4);
        assert!((d.inflight_mean - 4.0).abs() < 1e-9);
        assert_eq!(DeviceStats::default().delta(&DeviceStats::default()).inflight_mean, 0.0);
    }
}
