//! The `auto` preset: pick, when the journal opens, the preset that measured fastest on the
//! kind of device it opens, among those whose crash images the kernel and `e2fsck` replay
//! as they are (every preset here writes plain JBD2 with csum v3, no private feature bit).
//!
//! The choice is a table, not a guess made at run time: a short calibration run at every
//! mount would slow the mount, wear the device and still be noisier than the lab's
//! interleaved repetitions. The figures behind each row are in
//! `docs/results/file-device/README.md` (the file device) and `docs/results/cjfs/` (emulated
//! devices with a cache barrier); rerun them and change a row when they change. Those figures
//! predate polling waits in `cjfs` (589f337), which measured at or above its condvar waits at
//! every point tried, and spun 0 ms on the slow devices (`docs/results/waits/`): the choice
//! stands.

use cjfs_blockdev::DeviceCaps;

use crate::config::JournalConfig;

/// The preset `auto` resolves to on a device with these capabilities, and why.
pub fn choose(caps: &DeviceCaps) -> (&'static str, &'static str) {
    if caps.barrier {
        (
            "cjfs",
            "the device has a cache barrier: dual-thread commit, multi-version shadow paging, \
             coalescing and compound flush all apply (varmail-shared 32 threads on the emulated \
             consumer NVMe: 1.60 × jbd2, docs/results/cjfs/nvme-32t-50b30bc)",
        )
    } else {
        (NO_BARRIER_PRESET, NO_BARRIER_WHY)
    }
}

/// The preset for a device without a cache barrier (an image file, a loop device, most
/// real disks seen through a file). There the `cjfs` presets commit serially
/// (`dual_thread_barrier_only`), and what remains — multi-version shadow paging (writers
/// never wait for a buffer under log I/O) and coalescing — still measured ahead of `jbd2`.
const NO_BARRIER_PRESET: &str = "cjfs";

/// Why [`NO_BARRIER_PRESET`].
const NO_BARRIER_WHY: &str = "the device has no cache barrier, so commits are serial, and \
     multi-version shadow paging with coalescing still measured fastest there (image file, \
     varmail-shared, paired medians over 8 repetitions: 1.03 × jbd2 at 1 thread, 1.07 × at 4, \
     1.19 × at 16, 1.09 × at 32; docs/results/file-device)";

impl JournalConfig {
    /// The `auto` preset: resolved per device when the journal opens
    /// ([`JournalConfig::resolve_for`]).
    pub fn auto() -> Self {
        JournalConfig { name: "auto".into(), per_device: true, ..Self::jbd2() }
    }

    /// This configuration for a device with `caps`: itself, or for `auto` the chosen preset
    /// with this one's non-technique settings (journal kind, commit interval, transaction and
    /// ordered limits, checkpoint water mark, checksums, planted bugs) and the reason for the
    /// choice.
    pub fn resolve_for(&self, caps: &DeviceCaps) -> (JournalConfig, Option<String>) {
        if !self.per_device {
            return (self.clone(), None);
        }
        let (name, why) = choose(caps);
        let mut c = JournalConfig::preset(name).unwrap_or_else(JournalConfig::jbd2);
        c.name = format!("auto: {name}");
        // Whether anything is logged at all stays the caller's (a read-only mount says none).
        c.kind = self.kind;
        c.commit_interval = self.commit_interval;
        c.max_tx_blocks = self.max_tx_blocks;
        c.max_ordered_blocks = self.max_ordered_blocks;
        c.ordered_window_blocks = self.ordered_window_blocks;
        c.checkpoint_high_water = self.checkpoint_high_water;
        c.csum_v3 = self.csum_v3;
        #[cfg(feature = "planted-bugs")]
        {
            c.bugs = self.bugs;
        }
        (c, Some(format!("{name}, because {why}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(barrier: bool) -> DeviceCaps {
        DeviceCaps { barrier, volatile_cache: true, fua: false, queued_flush: false }
    }

    #[test]
    fn auto_resolves_per_device_and_keeps_the_callers_settings() {
        let mut auto = JournalConfig::auto();
        auto.commit_interval = std::time::Duration::from_millis(1500);
        let (with, why) = auto.resolve_for(&caps(true));
        assert_eq!(with.name, "auto: cjfs");
        assert!(with.multi_version && !with.per_device);
        assert_eq!(with.commit_interval, std::time::Duration::from_millis(1500));
        assert!(why.is_some_and(|w| w.contains("cache barrier")));
        let (without, _) = auto.resolve_for(&caps(false));
        assert_eq!(without.name, format!("auto: {NO_BARRIER_PRESET}"));
        let (plain, why) = JournalConfig::jbd2().resolve_for(&caps(true));
        assert_eq!((plain.name.as_str(), why), ("jbd2", None));
    }
}
