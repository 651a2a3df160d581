//! [`EmulatedSsd`]: an in-memory, real-time device with a latency model.
//!
//! # Timing model
//!
//! The device has `channels` parallel units, each with a *busy until* instant, and one
//! host link of `bandwidth_mb_s` shared by all of them. A write request of `n` blocks
//!
//! 1. transfers its `n * 4096` bytes over the link. With `link_turn_kib = 0` (a bus that
//!    moves one command's data at a time, as eMMC) the transfer waits for every earlier one:
//!    `xfer_done = max(now, link_free) + T`, `T = n * 4096 / bandwidth`. With a turn of
//!    `C` KiB (a queued interface whose controller fetches the data of outstanding commands
//!    in turns: NVMe, SATA NCQ) it waits only for the turn in progress, `w = min(R, T_C)`
//!    where `R = link_free - now` is the backlog, then shares the link with the backlog:
//!    `xfer_done = now + w + T + min(T, R - w)` (half the link until the shorter of the two
//!    is done; the backlog is taken as one stream). Either way `link_free` grows by `T`, so
//!    the aggregate bandwidth stays the preset's for whatever waits on `link_free` (the
//!    next transfer, an unqueued flush); the earlier requests' completion times, already
//!    handed out, are not pushed back, so a batch of small requests submitted together
//!    completes, request by request, sooner than its bytes could cross the link (each
//!    overtakes the ones before it). A flush is held to the link: a draining one waits for
//!    every submitted byte, a queued one for the bytes of the writes it covers and of every
//!    write submitted before them (below). A host that waits for such a batch's tickets
//!    and then does something other than flush (a FUA write) still gets the discount, at
//!    most the batch's transfer time;
//! 2. is assigned to the least busy channel and completes at
//!    `deadline = max(xfer_done, channel_free) + write_latency` (+ the FUA cost below); the
//!    channel is busy until `deadline`.
//!
//! For a single write on an idle device this is `now + write_latency + n * 4096 /
//! bandwidth`; the shared link caps the aggregate bandwidth at the preset's figure no matter
//! how many channels are busy, while small writes on different channels overlap almost
//! fully.
//!
//! The data is applied to the in-memory image **at submission** (it is visible to reads at
//! once, in submission order); the returned ticket completes at the deadline
//! ([`IoTicket::at`]). The crash harness takes ordering and durability from the
//! [`crate::Recorder`] log, not from this device.
//!
//! Reads take `read_latency + size / bandwidth` and do not occupy the channels.
//!
//! [`BlockDevice::flush`] costs `flush_base + flush_per_dirty_mb * dirty MiB` (without a
//! volatile cache only `flush_base`), where *dirty* is the data of non-FUA writes the flush
//! covers that no earlier flush covered. Which writes it covers depends on the interface
//! (`flush_queued`):
//!
//! * a queued flush (NVMe: "the flush applies to all commands completed prior to the
//!   submission of the Flush command") covers the writes whose deadline has passed when it
//!   is issued and does not wait for the others; their data stays dirty for the next flush.
//!   It starts writing back once the link has moved the bytes of the writes it covers and of
//!   every write submitted before them (a covered write's deadline may have come early,
//!   see above);
//!   A journal that flushes while another log's commit writes are in flight is not held up
//!   by them, as on a real drive;
//! * an unqueued one (SATA's FLUSH CACHE is not an NCQ command, so the host drains the queue
//!   before issuing it; eMMC serves one command at a time) first waits until every submitted
//!   write's deadline has passed and the link has moved every submitted byte (plus a write's
//!   latency), then covers them all. The second condition matters on a queued link: a
//!   transfer that shares the link with a backlog finishes early without pushing back the
//!   backlog's deadlines, already handed out, so a batch of small writes would otherwise all
//!   be "complete" long before their bytes could have crossed the link, and a writer that
//!   splits its data into many requests would beat one that sends a single large one.
//!
//! Flushes issued while another is in progress overlap (the drive has `channels` units to
//! program in parallel), except that one never ends before an earlier one still in progress:
//! it covers the data that one is writing back. This is an assumption of the model, and the
//! one per-core journaling's concurrent flushes rest on (`LogFlush::PerLog` in the journal);
//! a drive that serialises its flushes internally would charge a flush issued during another
//! the rest of that one first.
//!
//! A FUA write adds to its own deadline the cost of a flush of just its own data:
//! `flush_base + flush_per_dirty_mb * its MiB` (nothing without a volatile cache), and does
//! not count as dirty.
//!
//! [`BlockDevice::barrier`] (where the preset supports it) costs `barrier_latency`; ordering
//! is already guaranteed because writes are applied in submission order.
//!
//! # Failure injection
//!
//! [`EmulatedSsd::inject_flush_failure`] makes the next flush fail and poisons the device
//! (every later flush, barrier and write fails with [`DevError::Poisoned`], reads still
//! work); [`EmulatedSsd::inject_write_failure_at`] makes the next write covering a block fail
//! with [`DevError::Injected`] (its data is not applied).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::timing::{precise_sleep, precise_sleep_until};
use crate::{
    BlockDevice, Counters, DEFAULT_BLOCK_SIZE, DevError, DevResult, DeviceCaps, DeviceStats, IoTicket,
    WriteRequest,
};

/// Blocks per lazily allocated storage chunk (1 MiB of 4 KiB blocks).
const CHUNK_BLOCKS: u64 = 256;

/// Storage chunks of dropped devices, zeroed when the device is dropped and kept for the
/// next ones (at most [`SPARE_CHUNK_BYTES`]). A fresh allocation's pages fault in one at a
/// time on the first write into them — host CPU spent inside [`BlockDevice::submit`], which
/// no real device charges its host, and which fell mostly on journal writes (a new device's
/// log is all fresh until it wraps). Lock: the mutex, a leaf taken under a chunk lock or in
/// `drop`.
static SPARE_CHUNKS: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());
/// Bytes of spare chunks kept at most (a benchmark image's worth).
const SPARE_CHUNK_BYTES: usize = 1 << 30;

/// A zeroed chunk of `len` bytes: a spare one if there is one of that size.
fn new_chunk(len: usize) -> Box<[u8]> {
    let spare = {
        let mut spares = SPARE_CHUNKS.lock();
        spares.iter().position(|c| c.len() == len).map(|i| spares.swap_remove(i))
    };
    spare.unwrap_or_else(|| vec![0u8; len].into_boxed_slice())
}
/// Bytes in a MiB (the unit of the flush cost).
const MIB: u128 = 1 << 20;

/// Latency and capability figures of an emulated device.
///
/// The named presets are **assumptions** modelled on typical devices of each class (public
/// spec sheets, reviews and the latencies reported in the journaling papers), not
/// measurements of a particular drive. Build a custom preset with struct update syntax,
/// e.g. `SsdPreset { channels: 2, ..SsdPreset::nvme_consumer() }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SsdPreset {
    /// Short name, as accepted by [`SsdPreset::by_name`].
    pub name: &'static str,
    /// One-line description with the source of the assumption.
    pub description: &'static str,
    /// Latency of a 4 KiB write command on its channel, in µs (per request; the transfer
    /// time of the request's bytes is added from `bandwidth_mb_s`).
    pub write_latency_us: u64,
    /// Latency of a read command, in µs (transfer time added from `bandwidth_mb_s`).
    pub read_latency_us: u64,
    /// Host link bandwidth in MB/s (10^6 bytes per second), shared by all channels;
    /// 0 means unlimited.
    pub bandwidth_mb_s: u64,
    /// Fixed cost of a flush (cache flush command), in µs.
    pub flush_base_us: u64,
    /// Additional flush cost per MiB written since the previous flush, in µs (only with a
    /// volatile cache).
    pub flush_per_dirty_mb_us: u64,
    /// Parallel units (channels/dies) that serve writes concurrently; at least 1 is used.
    pub channels: usize,
    /// Granularity, in KiB, at which the link interleaves the data of outstanding write
    /// commands (see the module docs); 0 = one command's whole transfer at a time (FIFO).
    pub link_turn_kib: u64,
    /// The flush is a queued command (NVMe): it covers the writes completed when it is issued
    /// and does not wait for those in flight. `false`: the host drains the queue first (SATA,
    /// eMMC), so a flush waits for every submitted write (see the module docs).
    pub flush_queued: bool,
    /// Has a volatile write cache: flush cost grows with dirty data, FUA costs extra.
    pub volatile_cache: bool,
    /// Supports the barrier command (ordering without durability).
    pub barrier: bool,
    /// Cost of a barrier, in µs.
    pub barrier_latency_us: u64,
}

impl SsdPreset {
    /// `nvme-consumer`: consumer NVMe SSD without power-loss protection (Samsung 970 Pro
    /// class, the device of the CJFS and BarrierFS papers). Volatile cache; assumed to
    /// support a barrier command as in those papers. Assumed figures: write 20 µs, read
    /// 60 µs, 2500 MB/s, flush 400 µs + 300 µs per dirty MiB, 8 channels, barrier 5 µs; the
    /// data of outstanding commands shares the PCIe link in 128 KiB turns (a common maximum
    /// data transfer per command), so a small write is not queued behind a large one; the
    /// flush is a queued command (covers completed writes, does not wait for the others).
    pub const fn nvme_consumer() -> Self {
        SsdPreset {
            name: "nvme-consumer",
            description: "consumer NVMe SSD without power-loss protection, volatile cache, \
                          barrier command (assumed figures, Samsung 970 Pro class as in the \
                          CJFS/BarrierFS papers)",
            write_latency_us: 20,
            read_latency_us: 60,
            bandwidth_mb_s: 2500,
            flush_base_us: 400,
            flush_per_dirty_mb_us: 300,
            channels: 8,
            link_turn_kib: 128,
            flush_queued: true,
            volatile_cache: true,
            barrier: true,
            barrier_latency_us: 5,
        }
    }

    /// `optane`: 3D XPoint NVMe SSD (Intel Optane 900P/P4800X class). No volatile cache, so
    /// a flush is nearly free. Assumed figures: write 10 µs, read 10 µs, 2000 MB/s, flush
    /// 5 µs, 7 channels, barrier supported (1 µs), link shared in 128 KiB turns, queued flush.
    pub const fn optane() -> Self {
        SsdPreset {
            name: "optane",
            description: "3D XPoint NVMe SSD, no volatile cache (assumed figures, Intel Optane \
                          900P/P4800X class)",
            write_latency_us: 10,
            read_latency_us: 10,
            bandwidth_mb_s: 2000,
            flush_base_us: 5,
            flush_per_dirty_mb_us: 0,
            channels: 7,
            link_turn_kib: 128,
            flush_queued: true,
            volatile_cache: false,
            barrier: true,
            barrier_latency_us: 1,
        }
    }

    /// `emmc`: eMMC 5.x flash as in phones and single-board computers. One channel,
    /// volatile cache, expensive flush, no barrier. Assumed figures: write 150 µs, read
    /// 100 µs, 150 MB/s, flush 2000 µs + 1500 µs per dirty MiB; the bus moves one command's
    /// data at a time, and a flush waits for the writes before it.
    pub const fn emmc() -> Self {
        SsdPreset {
            name: "emmc",
            description: "eMMC 5.x flash, volatile cache, no barrier (assumed figures, typical \
                          mobile/embedded eMMC)",
            write_latency_us: 150,
            read_latency_us: 100,
            bandwidth_mb_s: 150,
            flush_base_us: 2000,
            flush_per_dirty_mb_us: 1500,
            channels: 1,
            link_turn_kib: 0,
            flush_queued: false,
            volatile_cache: true,
            barrier: false,
            barrier_latency_us: 0,
        }
    }

    /// `sata-ssd`: consumer SATA SSD (Samsung 860 EVO class). Volatile cache, no barrier.
    /// Assumed figures: write 40 µs, read 90 µs, 500 MB/s, flush 1000 µs + 800 µs per dirty
    /// MiB, 4 channels; NCQ lets the device move the data of queued commands in 128 KiB
    /// turns; FLUSH CACHE is not an NCQ command, so a flush waits for the queue to drain.
    pub const fn sata_ssd() -> Self {
        SsdPreset {
            name: "sata-ssd",
            description: "consumer SATA SSD, volatile cache, no barrier (assumed figures, \
                          Samsung 860 EVO class)",
            write_latency_us: 40,
            read_latency_us: 90,
            bandwidth_mb_s: 500,
            flush_base_us: 1000,
            flush_per_dirty_mb_us: 800,
            channels: 4,
            link_turn_kib: 128,
            flush_queued: false,
            volatile_cache: true,
            barrier: false,
            barrier_latency_us: 0,
        }
    }

    /// `ramdisk`: no latency, unlimited bandwidth, no cache, barrier supported (free).
    pub const fn ramdisk() -> Self {
        SsdPreset {
            name: "ramdisk",
            description: "zero-latency memory device, no cache, free barrier",
            write_latency_us: 0,
            read_latency_us: 0,
            bandwidth_mb_s: 0,
            flush_base_us: 0,
            flush_per_dirty_mb_us: 0,
            channels: 64,
            link_turn_kib: 0,
            flush_queued: true,
            volatile_cache: false,
            barrier: true,
            barrier_latency_us: 0,
        }
    }

    /// The assumed figures in one line (latencies, bandwidth, flush cost, channels, link,
    /// cache, barrier), as device descriptions and the lab print them.
    pub fn figures(&self) -> String {
        let bandwidth = if self.bandwidth_mb_s == 0 {
            "unlimited".to_string()
        } else {
            format!("{} MB/s", self.bandwidth_mb_s)
        };
        let link = if self.link_turn_kib == 0 {
            "one transfer at a time".to_string()
        } else {
            format!("shared in {} KiB turns", self.link_turn_kib)
        };
        format!(
            "write {} µs, read {} µs, {bandwidth}, flush {} µs + {} µs/dirty MiB ({}), {} channels, link {link}, {}, {}",
            self.write_latency_us,
            self.read_latency_us,
            self.flush_base_us,
            self.flush_per_dirty_mb_us,
            if self.flush_queued { "queued" } else { "after the queue drains" },
            self.channels.max(1),
            if self.volatile_cache { "volatile cache" } else { "no volatile cache" },
            if self.barrier {
                format!("barrier {} µs", self.barrier_latency_us)
            } else {
                "no barrier".to_string()
            },
        )
    }

    /// Every named preset.
    pub fn all() -> Vec<SsdPreset> {
        vec![
            SsdPreset::nvme_consumer(),
            SsdPreset::optane(),
            SsdPreset::emmc(),
            SsdPreset::sata_ssd(),
            SsdPreset::ramdisk(),
        ]
    }

    /// The preset called `name` (case-insensitive; `_` is accepted for `-`).
    pub fn by_name(name: &str) -> Option<SsdPreset> {
        let want = name.trim().to_ascii_lowercase().replace('_', "-");
        SsdPreset::all().into_iter().find(|p| p.name == want)
    }

    /// Time to move `bytes` over the host link.
    fn transfer(&self, bytes: u64) -> Duration {
        if self.bandwidth_mb_s == 0 {
            Duration::ZERO
        } else {
            // bytes / (MB/s * 10^6) seconds = bytes * 1000 / (MB/s) nanoseconds.
            let ns = u128::from(bytes) * 1000 / u128::from(self.bandwidth_mb_s);
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        }
    }

    /// When a transfer taking `xfer` on an idle link, started at `now` with the link busy
    /// until `link_free`, is done (see the module docs).
    fn link_done(&self, now: Instant, link_free: Instant, xfer: Duration) -> Instant {
        let backlog = link_free.saturating_duration_since(now);
        if self.link_turn_kib == 0 {
            return now + backlog + xfer;
        }
        let wait = backlog.min(self.transfer(self.link_turn_kib * 1024));
        now + wait + xfer + xfer.min(backlog - wait)
    }

    /// Cost of flushing `dirty_bytes` of cached data (just the base without a cache).
    fn flush_cost(&self, dirty_bytes: u64) -> Duration {
        let per = if self.volatile_cache {
            let ns = u128::from(dirty_bytes) * u128::from(self.flush_per_dirty_mb_us) * 1000 / MIB;
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        } else {
            Duration::ZERO
        };
        Duration::from_micros(self.flush_base_us) + per
    }
}

/// Timing state, protected by [`EmulatedSsd::timing`].
struct TimingState {
    /// When each channel finishes its last assigned write.
    channel_free: Vec<Instant>,
    /// When the host link finishes its last transfer.
    link_free: Instant,
    /// Latest deadline of any submitted write (an unqueued flush waits for it).
    max_deadline: Instant,
    /// Bytes of completed non-FUA writes no flush has covered yet.
    dirty_bytes: u64,
    /// Writes possibly still in flight: deadline, the dirty bytes they will add when they
    /// complete and when the link will have moved every byte submitted up to them (min-heap
    /// by deadline; completed ones are pruned into `dirty_bytes` and `dirty_link`).
    inflight: BinaryHeap<Reverse<(Instant, u64, Instant)>>,
    /// The latest "link moved every byte up to it" instant among the writes whose bytes are
    /// in `dirty_bytes`: a flush covering them cannot end its work before it.
    dirty_link: Instant,
    /// When the latest flush issued so far ends.
    flush_until: Instant,
}

impl TimingState {
    /// Moves the writes completed by `now` out of the in-flight heap; the number left.
    fn prune(&mut self, now: Instant) -> u64 {
        while let Some(&Reverse((t, bytes, link))) = self.inflight.peek() {
            if t > now {
                break;
            }
            self.inflight.pop();
            self.add_dirty(bytes, link);
        }
        self.inflight.len() as u64
    }

    /// Count a completed write's dirty bytes, whose link time is `link`.
    fn add_dirty(&mut self, bytes: u64, link: Instant) {
        if bytes > 0 {
            self.dirty_bytes += bytes;
            self.dirty_link = self.dirty_link.max(link);
        }
    }

    /// The dirty bytes a flush issued at `now` covers, taken (a queued flush: the completed
    /// writes'; an unqueued one: every submitted write's, as it waits for them all), and when
    /// the link will have moved them all.
    fn take_dirty(&mut self, now: Instant, queued: bool) -> (u64, Instant) {
        self.prune(now);
        if !queued && self.inflight.iter().any(|e| e.0.1 > 0) {
            let pending: Vec<_> = self.inflight.drain().collect();
            for e in &pending {
                self.add_dirty(e.0.1, e.0.2);
            }
            self.inflight.extend(pending.into_iter().map(|e| Reverse((e.0.0, 0, e.0.2))));
        }
        (std::mem::take(&mut self.dirty_bytes), self.dirty_link)
    }

    /// A flush issued at `now`: when it starts (an unqueued one after every submitted write)
    /// and when it ends. It covers the writes an earlier flush still in progress is writing
    /// back, so it never ends before that one: flushes overlap, but a later one that found
    /// nothing new to write does not overtake the one doing the work.
    fn flush_window(&mut self, now: Instant, p: &SsdPreset) -> (Instant, Instant) {
        // An unqueued flush drains the queue: every submitted byte crosses the link and is
        // programmed. A write that overtook the backlog on a queued link did not push the
        // backlog's completion times back (they were handed out), so the last deadline alone
        // would let a batch of writes beat the link's bandwidth; `link_free` does not.
        let drained = self.link_free + Duration::from_micros(p.write_latency_us);
        let (dirty, link) = self.take_dirty(now, p.flush_queued);
        // A queued flush covers only completed writes, but those the link model let finish
        // early (they overtook a backlog, or were overtaken without being pushed back) have
        // bytes that cross the link only by `link`: it cannot write them back before.
        let start = if p.flush_queued { now.max(link) } else { self.max_deadline.max(drained).max(now) };
        let end = (start + p.flush_cost(dirty)).max(self.flush_until);
        self.flush_until = end;
        (start, end)
    }
}

/// An in-memory, real-time device with a latency model. See the module docs.
pub struct EmulatedSsd {
    /// Figures (immutable).
    preset: SsdPreset,
    /// Block size in bytes (immutable).
    block_size: usize,
    /// Size in blocks (immutable).
    num_blocks: u64,
    /// Image, in chunks of [`CHUNK_BLOCKS`] blocks allocated on first write; each chunk's
    /// `RwLock` protects its bytes (`None` = all zeros).
    chunks: Vec<RwLock<Option<Box<[u8]>>>>,
    /// Held shared while a write request's data is applied to `chunks`, exclusively while
    /// [`EmulatedSsd::image_bytes`] copies them: the image is then a point-in-time snapshot
    /// (see there). Taken before any chunk lock.
    apply: RwLock<()>,
    /// Protected by this mutex: channel and link availability, dirty bytes and in-flight
    /// deadlines.
    timing: Mutex<TimingState>,
    /// Statistics (atomics, no lock).
    counters: Counters,
    /// Protected by this mutex: the cause recorded by the first failed flush; never cleared.
    poison: Mutex<Option<String>>,
    /// Atomic: make the next flush fail.
    fail_next_flush: AtomicBool,
    /// Protected by this mutex: blocks whose next write fails (each entry fires once).
    write_failures: Mutex<Vec<u64>>,
}

impl Drop for EmulatedSsd {
    fn drop(&mut self) {
        // Zeroed here, between a benchmark's rounds, not on the next device's writes, and
        // before the shared list's lock is taken (other devices take it for every new chunk).
        let mut mine: Vec<Box<[u8]>> = self.chunks.drain(..).filter_map(|c| c.into_inner()).collect();
        let room = SPARE_CHUNK_BYTES.saturating_sub(SPARE_CHUNKS.lock().iter().map(|c| c.len()).sum());
        let mut fit = 0;
        mine.retain(|c| {
            fit += c.len();
            fit <= room
        });
        mine.iter_mut().for_each(|c| c.fill(0));
        let mut spares = SPARE_CHUNKS.lock();
        let mut kept: usize = spares.iter().map(|c| c.len()).sum();
        for c in mine {
            if kept + c.len() <= SPARE_CHUNK_BYTES {
                kept += c.len();
                spares.push(c);
            }
        }
    }
}

impl EmulatedSsd {
    /// A zeroed device of `num_blocks` 4 KiB blocks with the given figures.
    pub fn new(preset: SsdPreset, num_blocks: u64) -> EmulatedSsd {
        EmulatedSsd::with_block_size(preset, num_blocks, DEFAULT_BLOCK_SIZE)
    }

    /// A zeroed device of `num_blocks` blocks of `block_size` bytes (one of
    /// [`crate::BLOCK_SIZES`]; others are taken as 4096). The latency model charges per
    /// request and per byte, so a device of small blocks is as fast per byte.
    pub fn with_block_size(preset: SsdPreset, num_blocks: u64, block_size: usize) -> EmulatedSsd {
        let block_size = if crate::valid_block_size(block_size) { block_size } else { DEFAULT_BLOCK_SIZE };
        let nchunks = num_blocks.div_ceil(CHUNK_BLOCKS) as usize;
        let now = Instant::now();
        EmulatedSsd {
            preset,
            block_size,
            num_blocks,
            chunks: (0..nchunks).map(|_| RwLock::new(None)).collect(),
            apply: RwLock::new(()),
            timing: Mutex::new(TimingState {
                channel_free: vec![now; preset.channels.max(1)],
                link_free: now,
                max_deadline: now,
                dirty_bytes: 0,
                inflight: BinaryHeap::new(),
                dirty_link: now,
                flush_until: now,
            }),
            counters: Counters::new(),
            poison: Mutex::new(None),
            fail_next_flush: AtomicBool::new(false),
            write_failures: Mutex::new(Vec::new()),
        }
    }

    /// A zero-latency device ([`SsdPreset::ramdisk`]) of `num_blocks` blocks.
    pub fn ram(num_blocks: u64) -> EmulatedSsd {
        EmulatedSsd::new(SsdPreset::ramdisk(), num_blocks)
    }

    /// A device holding `bytes` (its size rounded up to whole blocks, padded with zeros).
    /// All-zero chunks are not allocated.
    pub fn from_image(preset: SsdPreset, bytes: &[u8]) -> EmulatedSsd {
        EmulatedSsd::from_image_with_block_size(preset, bytes, DEFAULT_BLOCK_SIZE)
    }

    /// [`EmulatedSsd::from_image`] with blocks of `block_size` bytes.
    pub fn from_image_with_block_size(preset: SsdPreset, bytes: &[u8], block_size: usize) -> EmulatedSsd {
        let num_blocks = (bytes.len() as u64).div_ceil(block_size as u64);
        let dev = EmulatedSsd::with_block_size(preset, num_blocks, block_size);
        let chunk_bytes = dev.chunk_bytes();
        for (chunk, src) in dev.chunks.iter().zip(bytes.chunks(chunk_bytes)) {
            if src.iter().any(|&b| b != 0) {
                let mut data = vec![0u8; chunk_bytes].into_boxed_slice();
                data[..src.len()].copy_from_slice(src);
                *chunk.write() = Some(data);
            }
        }
        dev
    }

    /// The whole image (`num_blocks * block_size` bytes; unwritten blocks are zeros).
    ///
    /// A point-in-time snapshot, usable as a crash image while other threads keep writing:
    /// it holds every write request applied before it, whole, and nothing of later ones. A
    /// request is never half included, and a request submitted after another one returned is
    /// never included without it. (Copied chunk by chunk without that, the image of a live
    /// journal could hold a checkpoint's new journal superblock, in a late chunk, but not the
    /// home writes the checkpoint had made durable before writing it, in early chunks: a
    /// state no crash can leave, which loses committed blocks on recovery.)
    pub fn image_bytes(&self) -> Vec<u8> {
        let total = self.num_blocks as usize * self.block_size;
        let mut out = vec![0u8; total];
        let _no_writes = self.apply.write();
        for (chunk, dst) in self.chunks.iter().zip(out.chunks_mut(self.chunk_bytes())) {
            if let Some(data) = &*chunk.read() {
                dst.copy_from_slice(&data[..dst.len()]);
            }
        }
        out
    }

    /// The device's figures.
    pub fn preset(&self) -> &SsdPreset {
        &self.preset
    }

    /// Bytes of image memory allocated so far (whole chunks).
    pub fn allocated_bytes(&self) -> u64 {
        let n = self.chunks.iter().filter(|c| c.read().is_some()).count();
        (n * self.chunk_bytes()) as u64
    }

    /// Bytes in one chunk of the image.
    fn chunk_bytes(&self) -> usize {
        CHUNK_BLOCKS as usize * self.block_size
    }

    /// The cause of the poisoning, if an earlier flush failed.
    pub fn poisoned(&self) -> Option<String> {
        self.poison.lock().clone()
    }

    /// Make the next flush fail with [`DevError::Injected`] and poison the device.
    pub fn inject_flush_failure(&self) {
        self.fail_next_flush.store(true, Ordering::SeqCst);
    }

    /// Make the next write request covering `block` fail with [`DevError::Injected`] (through
    /// its ticket); that request's data is not applied. Fires once per call.
    pub fn inject_write_failure_at(&self, block: u64) {
        self.write_failures.lock().push(block);
    }

    fn check_range(&self, block: u64, count: u64) -> DevResult<()> {
        match block.checked_add(count) {
            Some(end) if end <= self.num_blocks => Ok(()),
            _ => Err(DevError::OutOfRange { block, count, num_blocks: self.num_blocks }),
        }
    }

    fn check_poison(&self) -> DevResult<()> {
        match &*self.poison.lock() {
            Some(cause) => Err(DevError::Poisoned(cause.clone())),
            None => Ok(()),
        }
    }

    /// Take an injected failure for a write of `[block, block + count)`, if any.
    fn take_write_failure(&self, block: u64, count: u64) -> Option<u64> {
        let mut f = self.write_failures.lock();
        let i = f.iter().position(|&b| b >= block && b < block + count)?;
        Some(f.swap_remove(i))
    }

    fn locate(&self, block: u64) -> (usize, usize) {
        let chunk = (block / CHUNK_BLOCKS) as usize;
        let off = (block % CHUNK_BLOCKS) as usize * self.block_size;
        (chunk, off)
    }
}

impl BlockDevice for EmulatedSsd {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            barrier: self.preset.barrier,
            volatile_cache: self.preset.volatile_cache,
            fua: true,
            queued_flush: self.preset.flush_queued,
        }
    }

    fn describe(&self) -> String {
        let p = &self.preset;
        format!(
            "emulated SSD '{}' ({} blocks of {} bytes): {}",
            p.name,
            self.num_blocks,
            self.block_size,
            p.figures()
        )
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.block_size;
        if !buf.len().is_multiple_of(bs) {
            return Err(DevError::BadLength(buf.len()));
        }
        let count = (buf.len() / bs) as u64;
        self.check_range(block, count)?;
        if count == 0 {
            return Ok(());
        }
        self.counters.record_read(count);
        precise_sleep(
            Duration::from_micros(self.preset.read_latency_us) + self.preset.transfer(buf.len() as u64),
        );
        for (i, dst) in buf.chunks_mut(bs).enumerate() {
            let (c, off) = self.locate(block + i as u64);
            match &*self.chunks[c].read() {
                Some(data) => dst.copy_from_slice(&data[off..off + bs]),
                None => dst.fill(0),
            }
        }
        Ok(())
    }

    fn submit(&self, req: WriteRequest) -> DevResult<IoTicket> {
        let count = req.bufs.len() as u64;
        let bs = self.block_size;
        self.check_range(req.block, count)?;
        if let Some(b) = req.bufs.iter().find(|b| b.len() != bs) {
            return Err(DevError::BadLength(b.len()));
        }
        self.check_poison()?;
        if count == 0 {
            return Ok(IoTicket::done(Ok(())));
        }
        // The request's timing starts when it is submitted: copying it into the emulator's
        // memory (and faulting in a fresh chunk) stands for the transfer, which the model
        // charges below, as a real device's DMA costs its host no CPU.
        let submitted = Instant::now();
        let failure = self.take_write_failure(req.block, count);
        if failure.is_none() {
            // The whole request is applied between two snapshots, never across one.
            let _applying = self.apply.read();
            for (i, src) in req.bufs.iter().enumerate() {
                let (c, off) = self.locate(req.block + i as u64);
                let mut chunk = self.chunks[c].write();
                let data = chunk.get_or_insert_with(|| new_chunk(CHUNK_BLOCKS as usize * bs));
                data[off..off + bs].copy_from_slice(&src[..]);
            }
        }

        let p = &self.preset;
        let bytes = count * bs as u64;
        let mut service = Duration::from_micros(p.write_latency_us);
        if req.fua && p.volatile_cache {
            service += p.flush_cost(bytes);
        }
        let (deadline, inflight) = {
            let mut t = self.timing.lock();
            let now = submitted;
            let xfer = p.transfer(bytes);
            let xfer_done = p.link_done(now, t.link_free, xfer);
            t.link_free = now.max(t.link_free) + xfer;
            let (ch, free) =
                t.channel_free.iter().copied().enumerate().min_by_key(|&(_, f)| f).unwrap_or((0, now));
            let deadline = xfer_done.max(free) + service;
            if let Some(f) = t.channel_free.get_mut(ch) {
                *f = deadline;
            }
            t.max_deadline = t.max_deadline.max(deadline);
            let dirty = if !req.fua && failure.is_none() { bytes } else { 0 };
            t.prune(now);
            let link_after = t.link_free;
            t.inflight.push(Reverse((deadline, dirty, link_after)));
            (deadline, t.inflight.len() as u64)
        };
        self.counters.record_write(count, bs, req.fua);
        self.counters.sample_inflight(inflight);
        let err = failure
            .map(|b| DevError::Injected(format!("write of block {b} (request at {} +{count})", req.block)));
        Ok(IoTicket::at(deadline, Arc::new(Mutex::new(err))))
    }

    fn flush(&self) -> DevResult<()> {
        self.check_poison()?;
        self.counters.record_flush();
        let (wait_until, end) = self.timing.lock().flush_window(Instant::now(), &self.preset);
        if !self.fail_next_flush.load(Ordering::SeqCst) {
            // One sleep for the writes still in flight and the flush itself (one spinning
            // tail, not two).
            precise_sleep_until(end);
            return Ok(());
        }
        precise_sleep_until(wait_until);
        if self.fail_next_flush.swap(false, Ordering::SeqCst) {
            let e = DevError::Injected("flush".to_string());
            let mut p = self.poison.lock();
            if p.is_none() {
                *p = Some(e.to_string());
            }
            return Err(e);
        }
        precise_sleep_until(end);
        Ok(())
    }

    fn barrier(&self) -> DevResult<()> {
        if !self.preset.barrier {
            return Err(DevError::Unsupported("barrier"));
        }
        self.check_poison()?;
        self.counters.record_barrier();
        precise_sleep(Duration::from_micros(self.preset.barrier_latency_us));
        Ok(())
    }

    fn stats(&self) -> DeviceStats {
        let n = self.timing.lock().prune(Instant::now());
        self.counters.set_inflight_now(n);
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockBuf, BlockKind, WriteTag, block_from_slice, wait_all};

    const BLOCK_SIZE: usize = DEFAULT_BLOCK_SIZE;
    const CHUNK_BYTES: usize = CHUNK_BLOCKS as usize * BLOCK_SIZE;

    fn pattern(seed: u8) -> BlockBuf {
        let v: Vec<u8> = (0..BLOCK_SIZE).map(|i| (i as u8).wrapping_add(seed)).collect();
        block_from_slice(&v)
    }

    fn median(mut v: Vec<Duration>) -> Duration {
        v.sort();
        v[v.len() / 2]
    }

    #[test]
    fn presets_by_name() {
        for p in SsdPreset::all() {
            assert_eq!(SsdPreset::by_name(p.name), Some(p));
            assert!(!p.description.is_empty());
        }
        assert_eq!(SsdPreset::by_name("NVME_CONSUMER"), Some(SsdPreset::nvme_consumer()));
        assert_eq!(SsdPreset::by_name("floppy"), None);
        assert!(EmulatedSsd::ram(1).describe().contains("ramdisk"));
    }

    #[test]
    fn read_your_writes_and_zeros() -> DevResult<()> {
        let dev = EmulatedSsd::new(SsdPreset::nvme_consumer(), 1000);
        assert!(dev.read_block(999)?.iter().all(|&b| b == 0));
        let t = dev.submit(WriteRequest {
            block: 255,
            bufs: vec![pattern(1), pattern(2)], // spans two chunks
            tag: WriteTag::kind(BlockKind::Data),
            fua: false,
        })?;
        // Visible at once, before completion.
        assert_eq!(&dev.read_block(256)?[..], &pattern(2)[..]);
        t.wait()?;
        let mut b = vec![0u8; 3 * BLOCK_SIZE];
        dev.read(254, &mut b)?;
        assert!(b[..BLOCK_SIZE].iter().all(|&x| x == 0));
        assert_eq!(&b[BLOCK_SIZE..2 * BLOCK_SIZE], &pattern(1)[..]);
        assert_eq!(&b[2 * BLOCK_SIZE..], &pattern(2)[..]);
        assert_eq!(dev.allocated_bytes(), 2 * CHUNK_BYTES as u64);
        assert!(matches!(
            dev.write_block(1000, pattern(0), WriteTag::default()),
            Err(DevError::OutOfRange { .. })
        ));
        assert!(matches!(dev.read(0, &mut [0u8; 10]), Err(DevError::BadLength(10))));
        Ok(())
    }

    #[test]
    fn large_device_is_lazy_and_images_round_trip() -> DevResult<()> {
        let dev = EmulatedSsd::ram(1 << 20); // 4 GiB
        assert_eq!(dev.allocated_bytes(), 0);
        dev.write_block(12345, pattern(7), WriteTag::default())?;
        assert_eq!(dev.allocated_bytes(), CHUNK_BYTES as u64);

        let small = EmulatedSsd::ram(300);
        small.write_block(299, pattern(3), WriteTag::default())?;
        let img = small.image_bytes();
        assert_eq!(img.len(), 300 * BLOCK_SIZE);
        let back = EmulatedSsd::from_image(SsdPreset::ramdisk(), &img);
        assert_eq!(back.num_blocks(), 300);
        assert_eq!(back.allocated_bytes(), CHUNK_BYTES as u64); // first chunk is all zeros
        assert_eq!(&back.read_block(299)?[..], &pattern(3)[..]);
        assert_eq!(back.image_bytes(), img);
        Ok(())
    }

    #[test]
    fn image_is_a_point_in_time_snapshot() -> DevResult<()> {
        // A journal checkpoint writes home blocks (early in the device), waits and flushes,
        // then writes the journal superblock that frees their log space (later in the
        // device). A crash image must never hold the second write without the first.
        let dev = Arc::new(EmulatedSsd::ram(32 * CHUNK_BLOCKS));
        let (home, sb) = (1, 16 * CHUNK_BLOCKS);
        dev.write_block(home, pattern(0), WriteTag::default())?;
        dev.write_block(sb, pattern(0), WriteTag::default())?;
        // Stall the copy between the two chunks, as a preempted copying thread would.
        let stall = dev.chunks[8].write();
        let snap = {
            let dev = dev.clone();
            std::thread::spawn(move || dev.image_bytes())
        };
        std::thread::sleep(Duration::from_millis(50));
        let writer = {
            let dev = dev.clone();
            std::thread::spawn(move || -> DevResult<()> {
                dev.write_block(home, pattern(1), WriteTag::default())?;
                dev.write_block(sb, pattern(2), WriteTag::default())
            })
        };
        // Without the snapshot both writes land while the copy is stalled; with it they wait.
        std::thread::sleep(Duration::from_millis(50));
        drop(stall);
        let img = snap.join().expect("snapshot thread");
        writer.join().expect("writer thread")?;
        let block = |b: u64| &img[b as usize * BLOCK_SIZE..(b as usize + 1) * BLOCK_SIZE];
        let has_home = block(home) == &pattern(1)[..];
        let has_sb = block(sb) == &pattern(2)[..];
        assert!(has_home || !has_sb, "the image holds the later write without the earlier one");
        Ok(())
    }

    #[test]
    fn qd1_write_latency_at_least_preset() -> DevResult<()> {
        let p = SsdPreset::nvme_consumer();
        let dev = EmulatedSsd::new(p, 64);
        let lat: Vec<Duration> = (0..20)
            .map(|i| {
                let t = Instant::now();
                dev.write_block(i, pattern(1), WriteTag::default()).map(|_| t.elapsed())
            })
            .collect::<DevResult<_>>()?;
        let min = lat.iter().min().copied().unwrap_or_default();
        assert!(min >= Duration::from_micros(p.write_latency_us), "min {min:?}");
        let st = dev.stats();
        assert_eq!(st.writes, 20);
        assert!((st.inflight_mean - 1.0).abs() < 1e-9, "{st:?}");
        assert_eq!(st.inflight_now, 0);
        Ok(())
    }

    #[test]
    fn parallel_writes_overlap() -> DevResult<()> {
        // Larger latency than the presets so scheduling noise does not matter.
        let p = SsdPreset { write_latency_us: 5000, ..SsdPreset::nvme_consumer() };
        let dev = EmulatedSsd::new(p, 64);
        let t = Instant::now();
        dev.write_block(0, pattern(0), WriteTag::default())?;
        let one = t.elapsed();
        let t = Instant::now();
        let tickets: Vec<IoTicket> = (0..8)
            .map(|i| dev.submit(WriteRequest::one(i, pattern(i as u8), WriteTag::default())))
            .collect::<DevResult<_>>()?;
        assert_eq!(dev.stats().inflight_now, 8);
        wait_all(tickets)?;
        let eight = t.elapsed();
        assert!(eight < one * 3, "8 parallel writes took {eight:?}, one took {one:?}");
        assert_eq!(dev.stats().inflight_max, 8);

        // One channel serializes them.
        let serial = EmulatedSsd::new(SsdPreset { write_latency_us: 500, channels: 1, ..p }, 64);
        let t = Instant::now();
        let tickets: Vec<IoTicket> = (0..4)
            .map(|i| serial.submit(WriteRequest::one(i, pattern(0), WriteTag::default())))
            .collect::<DevResult<_>>()?;
        wait_all(tickets)?;
        assert!(t.elapsed() >= Duration::from_micros(2000));
        Ok(())
    }

    #[test]
    fn flush_cost_grows_with_dirty_data() -> DevResult<()> {
        let p = SsdPreset::nvme_consumer();
        let dev = EmulatedSsd::new(p, 4096);
        let time_flush = |dev: &EmulatedSsd| -> DevResult<Duration> {
            let t = Instant::now();
            dev.flush()?;
            Ok(t.elapsed())
        };
        let clean = median((0..5).map(|_| time_flush(&dev)).collect::<DevResult<_>>()?);
        assert!(clean >= Duration::from_micros(p.flush_base_us));
        // 8 MiB dirty: + 2400 µs.
        let bufs: Vec<BlockBuf> = (0..2048).map(|_| pattern(5)).collect();
        dev.submit(WriteRequest { block: 0, bufs, tag: WriteTag::default(), fua: false })?.wait()?;
        let dirty = time_flush(&dev)?;
        let want = p.flush_base_us + 8 * p.flush_per_dirty_mb_us;
        assert!(dirty >= Duration::from_micros(want), "dirty {dirty:?} < {want} µs");
        assert!(dirty > clean, "clean {clean:?} dirty {dirty:?}");
        // Dirty data was reset by the flush (median of several: a preempted flush on a busy
        // machine takes as long as it is descheduled).
        let again = median((0..5).map(|_| time_flush(&dev)).collect::<DevResult<_>>()?);
        assert!(again < dirty, "again {again:?} dirty {dirty:?}");

        // Without a volatile cache, dirty data costs nothing.
        let opt = EmulatedSsd::new(SsdPreset::optane(), 4096);
        let bufs: Vec<BlockBuf> = (0..2048).map(|_| pattern(5)).collect();
        opt.submit(WriteRequest { block: 0, bufs, tag: WriteTag::default(), fua: false })?.wait()?;
        assert!(time_flush(&opt)? < Duration::from_micros(1500));
        Ok(())
    }

    #[test]
    fn unqueued_flush_waits_for_inflight_writes() -> DevResult<()> {
        let p = SsdPreset { write_latency_us: 3000, flush_queued: false, ..SsdPreset::ramdisk() };
        let dev = EmulatedSsd::new(p, 8);
        let t = Instant::now();
        let _ticket = dev.submit(WriteRequest::one(0, pattern(0), WriteTag::default()))?;
        dev.flush()?;
        assert!(t.elapsed() >= Duration::from_micros(3000));
        Ok(())
    }

    #[test]
    fn queued_flush_does_not_wait_for_writes_in_flight() -> DevResult<()> {
        // A 2 s write in flight: a queued flush returns at once (generous bound for a
        // preempted thread), the write completes on its own time.
        let p = SsdPreset { write_latency_us: 2_000_000, flush_queued: true, ..SsdPreset::ramdisk() };
        let dev = EmulatedSsd::new(p, 8);
        let t = Instant::now();
        let ticket = dev.submit(WriteRequest::one(0, pattern(0), WriteTag::default()))?;
        dev.flush()?;
        assert!(t.elapsed() < Duration::from_millis(1000), "flush waited {:?}", t.elapsed());
        ticket.wait()?;
        assert!(t.elapsed() >= Duration::from_millis(2000));
        Ok(())
    }

    /// One channel and the link idle at `t0`, nothing in flight or flushing.
    fn idle_timing(t0: Instant, max_deadline: Instant, dirty_bytes: u64) -> TimingState {
        TimingState {
            channel_free: vec![t0],
            link_free: t0,
            max_deadline,
            dirty_bytes,
            inflight: BinaryHeap::new(),
            dirty_link: t0,
            flush_until: t0,
        }
    }

    #[test]
    fn each_write_is_dirty_for_exactly_one_flush() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let state = || {
            let mut t = idle_timing(t0, t0 + ms(10), 0);
            t.inflight.push(Reverse((t0 + ms(1), 100, t0)));
            t.inflight.push(Reverse((t0 + ms(10), 20, t0)));
            t.inflight.push(Reverse((t0 + ms(2), 0, t0))); // a FUA write: never dirty
            t
        };
        // Queued: a flush at 5 ms covers the write completed at 1 ms; the one completing at
        // 10 ms is the next flush's.
        let mut q = state();
        assert_eq!(q.take_dirty(t0 + ms(5), true).0, 100);
        assert_eq!(q.inflight.len(), 1);
        assert_eq!(q.take_dirty(t0 + ms(6), true).0, 0);
        assert_eq!(q.take_dirty(t0 + ms(11), true).0, 20);
        assert_eq!(q.take_dirty(t0 + ms(12), true).0, 0);
        // Unqueued: the flush at 5 ms waits for both and covers both; neither comes back.
        let mut u = state();
        assert_eq!(u.take_dirty(t0 + ms(5), false).0, 120);
        assert_eq!(u.prune(t0 + ms(5)), 1, "the write still in flight is still counted as such");
        assert_eq!(u.take_dirty(t0 + ms(11), false).0, 0);
    }

    #[test]
    fn a_later_flush_with_nothing_new_does_not_overtake_the_one_writing_back() {
        let p = SsdPreset::nvme_consumer();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut t = idle_timing(t0, t0, 8 << 20);
        // The first flush writes back 8 MiB: base + 8 * per MiB.
        let (_, a) = t.flush_window(t0, &p);
        assert_eq!(a, t0 + p.flush_cost(8 << 20));
        // One issued 1 ms later finds nothing new, yet covers those 8 MiB too.
        let (start, b) = t.flush_window(t0 + ms(1), &p);
        assert_eq!((start, b), (t0 + ms(1), a));
        // Once that is over, a flush costs its own work only.
        let later = a + ms(1);
        assert_eq!(t.flush_window(later, &p).1, later + p.flush_cost(0));
        // Overlapping flushes with work of their own each end on their own time.
        t.dirty_bytes = 1 << 20;
        let c0 = later + ms(10);
        let (_, c) = t.flush_window(c0, &p);
        t.dirty_bytes = 4 << 20;
        let (_, d) = t.flush_window(c0 + Duration::from_micros(10), &p);
        assert_eq!(c, c0 + p.flush_cost(1 << 20));
        assert_eq!(d, c0 + Duration::from_micros(10) + p.flush_cost(4 << 20));
    }

    #[test]
    fn small_write_behind_a_large_one_waits_one_turn_on_a_queued_link() {
        let nvme = SsdPreset::nvme_consumer();
        let fifo = SsdPreset { link_turn_kib: 0, ..nvme };
        let now = Instant::now();
        // 4 MiB in flight: 1.68 ms of the link.
        let big = nvme.transfer(4 << 20);
        let link_free = now + big;
        let small = nvme.transfer(80 << 10);
        let turn = nvme.transfer(128 << 10);
        assert_eq!(fifo.link_done(now, link_free, small), now + big + small);
        assert_eq!(nvme.link_done(now, link_free, small), now + turn + 2 * small);
        // An idle link: the transfer alone, either way.
        assert_eq!(nvme.link_done(now, now, small), now + small);
        assert_eq!(fifo.link_done(now, now, small), now + small);
        // A transfer longer than the backlog finishes after the backlog, plus its own rest.
        assert_eq!(nvme.link_done(now, now + turn / 2, big), now + turn / 2 + big);
    }

    #[test]
    fn queued_link_keeps_the_preset_bandwidth() -> DevResult<()> {
        // Two 1 MiB writes then a 4 KiB one on a 10 MB/s link (105 ms per large write, so the
        // host's copy between submissions is negligible): the link stays busy for all the
        // bytes, and the small write completes before the large ones, not after them.
        let p =
            SsdPreset { write_latency_us: 0, bandwidth_mb_s: 10, channels: 4, ..SsdPreset::nvme_consumer() };
        let dev = EmulatedSsd::new(p, 1024);
        let big: Vec<BlockBuf> = (0..256).map(|i| pattern(i as u8)).collect();
        let t0 = Instant::now();
        let a =
            dev.submit(WriteRequest { block: 0, bufs: big.clone(), tag: WriteTag::default(), fua: false })?;
        let b = dev.submit(WriteRequest { block: 256, bufs: big, tag: WriteTag::default(), fua: false })?;
        let c = dev.submit(WriteRequest::one(600, pattern(9), WriteTag::default()))?;
        let link_free = dev.timing.lock().link_free;
        let total = p.transfer((512 + 1) * 4096);
        assert!(link_free >= t0 + total, "the link is busy for every byte submitted");
        let (a, b, c) = (a.deadline().unwrap(), b.deadline().unwrap(), c.deadline().unwrap());
        assert!(c < a && c < b, "the small write does not wait for the large ones");
        Ok(())
    }

    #[test]
    fn unqueued_flush_waits_for_every_byte_on_the_link() -> DevResult<()> {
        // Sixteen 64 KiB writes at once on a 10 MB/s queued link with an unqueued flush (the
        // SATA preset's interface): each overtakes part of the backlog, so the last deadline
        // comes long before the 1 MiB could have crossed the link. The flush after them must
        // not: one large request and sixteen small ones cost the same.
        let p =
            SsdPreset { write_latency_us: 0, bandwidth_mb_s: 10, flush_base_us: 0, ..SsdPreset::sata_ssd() };
        assert!(!p.flush_queued && p.link_turn_kib > 0);
        let dev = EmulatedSsd::new(p, 1024);
        let t0 = Instant::now();
        let mut last = t0;
        for i in 0..16u64 {
            let bufs: Vec<BlockBuf> = (0..16).map(|_| pattern(i as u8)).collect();
            let t = dev.submit(WriteRequest { block: i * 16, bufs, tag: WriteTag::default(), fua: false })?;
            last = last.max(t.deadline().unwrap());
        }
        let total = p.transfer(1 << 20);
        assert!(last < t0 + total / 2, "the model lets small writes overtake the backlog");
        let (start, _) = dev.timing.lock().flush_window(Instant::now(), &p);
        assert!(start >= t0 + total, "the flush starts only once the link moved every byte");
        Ok(())
    }

    #[test]
    fn queued_flush_waits_for_the_link_to_move_what_it_covers() -> DevResult<()> {
        // The same sixteen writes on a queued link and a queued flush (NVMe's interface): the
        // host waits for every ticket, which the model completes early, then flushes; the
        // flush covers them all and cannot start writing them back before their bytes
        // crossed the link.
        let p = SsdPreset {
            write_latency_us: 0,
            bandwidth_mb_s: 10,
            flush_base_us: 0,
            ..SsdPreset::nvme_consumer()
        };
        assert!(p.flush_queued && p.link_turn_kib > 0);
        let dev = EmulatedSsd::new(p, 1024);
        let t0 = Instant::now();
        let mut tickets = Vec::new();
        for i in 0..16u64 {
            let bufs: Vec<BlockBuf> = (0..16).map(|_| pattern(i as u8)).collect();
            tickets.push(dev.submit(WriteRequest {
                block: i * 16,
                bufs,
                tag: WriteTag::default(),
                fua: false,
            })?);
        }
        let last = tickets.iter().filter_map(IoTicket::deadline).max().unwrap();
        let total = p.transfer(1 << 20);
        assert!(last < t0 + total / 2, "the model lets small writes overtake the backlog");
        let (start, _) = dev.timing.lock().flush_window(last + Duration::from_micros(1), &p);
        assert!(start >= t0 + total, "the flush starts only once the link moved what it covers");
        Ok(())
    }

    #[test]
    fn fua_write_costs_a_flush() -> DevResult<()> {
        let p = SsdPreset::emmc();
        let dev = EmulatedSsd::new(p, 8);
        let mut req = WriteRequest::one(0, pattern(0), WriteTag::default());
        req.fua = true;
        let t = Instant::now();
        dev.submit(req)?.wait()?;
        assert!(t.elapsed() >= Duration::from_micros(p.write_latency_us + p.flush_base_us));
        assert_eq!(dev.stats().fua_writes, 1);
        Ok(())
    }

    #[test]
    fn barrier_support() -> DevResult<()> {
        let emmc = EmulatedSsd::new(SsdPreset::emmc(), 8);
        assert!(!emmc.caps().barrier);
        assert!(matches!(emmc.barrier(), Err(DevError::Unsupported("barrier"))));
        let nvme = EmulatedSsd::new(SsdPreset::nvme_consumer(), 8);
        assert!(nvme.caps().barrier);
        nvme.barrier()?;
        assert_eq!(nvme.stats().barriers, 1);
        Ok(())
    }

    #[test]
    fn injected_flush_failure_poisons() -> DevResult<()> {
        let dev = EmulatedSsd::ram(8);
        dev.write_block(0, pattern(1), WriteTag::default())?;
        dev.inject_flush_failure();
        assert!(matches!(dev.flush(), Err(DevError::Injected(_))));
        assert!(dev.poisoned().is_some());
        assert!(matches!(dev.flush(), Err(DevError::Poisoned(_))));
        assert!(matches!(dev.write_block(1, pattern(1), WriteTag::default()), Err(DevError::Poisoned(_))));
        assert!(matches!(dev.barrier(), Err(DevError::Poisoned(_))));
        assert_eq!(&dev.read_block(0)?[..], &pattern(1)[..]);
        Ok(())
    }

    #[test]
    fn injected_write_failure() -> DevResult<()> {
        let dev = EmulatedSsd::ram(8);
        dev.inject_write_failure_at(3);
        let req = WriteRequest {
            block: 2,
            bufs: vec![pattern(1), pattern(2)],
            tag: WriteTag::default(),
            fua: false,
        };
        assert!(matches!(dev.submit(req)?.wait(), Err(DevError::Injected(_))));
        assert!(dev.read_block(3)?.iter().all(|&b| b == 0));
        // Fires once; the device is not poisoned.
        dev.write_block(3, pattern(2), WriteTag::default())?;
        assert_eq!(&dev.read_block(3)?[..], &pattern(2)[..]);
        dev.flush()?;
        Ok(())
    }
}
