//! Recording a workload: a freshly made file system (with the workload's setup applied and
//! cleanly unmounted) is the *base image*; the workload then runs on a [`Recorder`] over an
//! in-memory device holding that image, so the recorded log applies to a known base.
//!
//! Between operations the recorder's log is drained into one vector, so every operation
//! knows the log positions at which it started and returned ([`OpMark`]). Concurrent
//! operations drain under one lock, which keeps the combined log in sequence order.
//!
//! What the run itself produced (the base image, the log, and per operation the inode it
//! created and its [`OpMark`]) is all the oracle needs: [`assemble`] builds the model
//! order and the history from it, both when recording and when a failure file's embedded
//! recording is replayed (see [`super::replay`]).

use std::sync::Arc;

use std::collections::BTreeMap;

use cjfs_blockdev::{Device, RecordedOp, Recorder};
use cjfs_fs::{Fs, Ino, MkfsOptions, MountOptions, mkfs};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::CrashError;
use super::memdev::CowDevice;
use super::oracle::{self, History, Model};
use super::workloads::{Op, Workload, exec};

/// Size of the crash-test file system: 16 MiB (the smallest cjfs makes), 4 MiB journal.
pub const IMAGE_BLOCKS: u64 = 4096;

/// Blocks of each extra log area of a per-core journal's crash image: the smallest a log may
/// be, so the logs fill, checkpoint under pressure and starve often.
pub const LOG_AREA_BLOCKS: u32 = 1024;

/// Blocks of each ijournal area of an iJournaling preset's crash image: small, so records
/// wrap around the area and fill it within a workload.
pub const IJOURNAL_AREA_BLOCKS: u32 = 24;

/// Blocks of the crash image for a journal of `logs` logs: [`IMAGE_BLOCKS`], plus room for
/// the extra log areas (the journal may take at most half of the free space).
pub fn image_blocks(logs: usize) -> u64 {
    IMAGE_BLOCKS + 2560 * logs.saturating_sub(1) as u64
}

/// Log positions of one recorded operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpMark {
    /// Log length when the operation started.
    pub start: usize,
    /// Log length when it returned.
    pub end: usize,
}

/// What one recorded operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpResult {
    /// The inode it created (creat, mkdir, symlink).
    pub ino: Option<Ino>,
    /// Its log positions.
    pub mark: OpMark,
}

/// A recorded workload.
pub struct Recording {
    /// The base image every crash state starts from.
    pub base: Arc<Vec<u8>>,
    /// Everything the device saw after the base image, in sequence order (the mount's own
    /// writes included).
    pub log: Vec<RecordedOp>,
    /// Per operation in workload order ([`Workload::flat_ops`]: round by round, thread
    /// order, ending with `Unmount`): what the run did.
    pub results: Vec<OpResult>,
    /// The recorded operations in model order (ending with `Unmount`; within a concurrent
    /// round the order [`oracle::apply_round`] chose).
    pub ops: Vec<Op>,
    /// Their log positions, same order.
    pub marks: Vec<OpMark>,
    /// The model's history (state 0 = base image).
    pub history: History,
    /// iJournaling's statistics of the run (`None`: the mount did not use it).
    pub ijournal: Option<cjfs_fs::IjStats>,
}

impl Recording {
    /// Operations that had started before log position `x` (the state index bound `hi`).
    pub fn started_before(&self, x: usize) -> u32 {
        self.marks.iter().rposition(|m| m.start < x).map_or(0, |i| i as u32 + 1)
    }

    /// Persistence calls that had returned by log position `x`: every operation whose
    /// return guarantees something, the ones synchronous updates make durable included
    /// ([`oracle::Changes::implied`]).
    pub fn returned_by(&self, x: usize) -> Vec<usize> {
        self.marks
            .iter()
            .enumerate()
            .filter(|(i, m)| m.end <= x && self.history.guarantees.get(*i).is_some_and(|g| !g.is_empty()))
            .map(|(i, _)| i)
            .collect()
    }

    /// A short fingerprint of the log's shape (operation kinds and blocks), to tell whether a
    /// replay recorded the same log.
    pub fn fingerprint(&self) -> u64 {
        let mut v = Vec::with_capacity(self.log.len() * 9);
        for op in &self.log {
            match op {
                RecordedOp::Write { block, bufs, fua, .. } => {
                    v.push(1 + u8::from(*fua));
                    v.extend_from_slice(&block.to_le_bytes());
                    v.extend_from_slice(&(bufs.len() as u32).to_le_bytes());
                }
                RecordedOp::WriteDone { write_seq, .. } => {
                    v.push(3);
                    v.extend_from_slice(&write_seq.to_le_bytes());
                }
                RecordedOp::FlushStart { .. } => v.push(4),
                RecordedOp::Flush { .. } => v.push(5),
                RecordedOp::Barrier { .. } => v.push(6),
            }
        }
        super::oracle::hash64(&v)
    }
}

/// Make the base image: mkfs with blocks of `block_size` bytes, mount with `opts`, run
/// `setup`, unmount. The image has as many bytes whatever the block size.
pub fn make_base(opts: &MountOptions, setup: &[Op], block_size: usize) -> Result<Arc<Vec<u8>>, CrashError> {
    let bytes = image_blocks(opts.journal.logs.wanted()) as usize * cjfs_blockdev::DEFAULT_BLOCK_SIZE;
    let zero = Arc::new(vec![0u8; bytes]);
    let dev = Arc::new(CowDevice::with_block_size(zero, BTreeMap::new(), block_size));
    let mk = MkfsOptions {
        uuid: Some(*b"cjfs-crash-test!"),
        hash_seed: Some(*b"cjfs-crash-seed!"),
        assume_zeroed: true,
        ..MkfsOptions::default()
    };
    let mk = cjfs_fs::preset::mkfs_for(opts, LOG_AREA_BLOCKS, mk);
    mkfs(&*dev, &mk)?;
    let fs = Fs::open(dev.clone() as Device, opts.clone())?;
    for op in setup {
        exec(&fs, op).map_err(|e| CrashError::Workload(format!("setup `{}`: {e}", op.describe())))?;
    }
    fs.unmount()?;
    Ok(Arc::new(dev.image_bytes()))
}

/// The model of what the image `base` holds (read from a throwaway mount of a copy).
pub fn model_of(opts: &MountOptions, base: Arc<Vec<u8>>) -> Result<Model, CrashError> {
    let dev = Arc::new(CowDevice::new(base, BTreeMap::new()));
    let fs = Fs::open(dev as Device, opts.clone())?;
    let m = Model::from_fs(&fs)?;
    fs.unmount()?;
    Ok(m)
}

/// Build the model order, the log positions in that order and the history of `wl` from
/// what a run did (`results`, in workload order, see [`Recording::results`]), starting from
/// `model` (the base image's).
pub fn assemble(
    wl: &Workload,
    mut model: Model,
    results: &[OpResult],
) -> Result<(Vec<Op>, Vec<OpMark>, History), CrashError> {
    let n: usize = wl.rounds.iter().map(Vec::len).sum();
    if results.len() != n + 1 {
        return Err(CrashError::Replay(format!(
            "{} operation results for {} operations and the unmount",
            results.len(),
            n
        )));
    }
    let mut history = History::new(&model);
    let mut ops = Vec::with_capacity(n + 1);
    let mut marks = Vec::with_capacity(n + 1);
    if wl.free_running {
        // Model order: by start position, each thread's operations in its own order, never
        // one before an operation that returned before it started.
        let width = wl.rounds.first().map_or(1, Vec::len).max(1);
        let flat: Vec<&Op> = wl.rounds.iter().flatten().collect();
        let mut by_start: Vec<usize> = (0..n).collect();
        by_start.sort_by_key(|&i| (results[i].mark.start, i / width));
        let mut at = vec![0usize; n];
        for (k, &i) in by_start.iter().enumerate() {
            at[i] = k;
        }
        let pairs: Vec<(&Op, Option<Ino>)> = by_start.iter().map(|&i| (flat[i], results[i].ino)).collect();
        let after: Vec<Option<usize>> =
            by_start.iter().map(|&i| i.checked_sub(width).map(|p| at[p])).collect();
        let spans: Vec<(usize, usize)> =
            by_start.iter().map(|&i| (results[i].mark.start, results[i].mark.end)).collect();
        let order = oracle::apply_ordered(&mut model, &mut history, &pairs, &after, &spans)
            .map_err(CrashError::Workload)?;
        for k in order {
            ops.push(flat[by_start[k]].clone());
            marks.push(results[by_start[k]].mark);
        }
    } else {
        let mut k = 0;
        for round in &wl.rounds {
            let rs = &results[k..k + round.len()];
            let pairs: Vec<(&Op, Option<Ino>)> = round.iter().zip(rs).map(|(op, r)| (op, r.ino)).collect();
            let order =
                oracle::apply_round(&mut model, &mut history, &pairs).map_err(CrashError::Workload)?;
            for j in order {
                ops.push(round[j].clone());
                marks.push(rs[j].mark);
            }
            k += round.len();
        }
    }
    history.push(&Op::Unmount, &model, &Default::default());
    ops.push(Op::Unmount);
    marks.push(results[n].mark);
    Ok((ops, marks, history))
}

/// How long a device flush takes while a workload is recorded. An instant flush would let
/// each commit finish before the next could start, so the dual-thread presets would never
/// be caught with several transactions committing; a disk-like flush time lets later
/// commits (log blocks, barrier, commit block) be issued while it runs.
pub const RECORD_FLUSH_DELAY: std::time::Duration = std::time::Duration::from_micros(300);

/// Pin the calling thread to core `t` (modulo the cores it may run on); best effort.
fn pin_to_core(t: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it, and
    // sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(t % cores, &mut set);
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Run `wl` on a recorder over `base` (a device with a cache barrier if `barrier`) and return
/// the recording. The mount itself is not recorded: the recording's base image is `base` as
/// mounted (its superblock marked in use), which is durable when the mount returns.
pub fn record(
    opts: &MountOptions,
    wl: &Workload,
    base: Arc<Vec<u8>>,
    barrier: bool,
) -> Result<Recording, CrashError> {
    let dev = Arc::new(
        CowDevice::new(base, BTreeMap::new()).with_flush_delay(RECORD_FLUSH_DELAY).with_barrier(barrier),
    );
    // The model starts from what the base image holds.
    let model = {
        let ro = MountOptions { read_only: true, ..opts.clone() };
        let fs = Fs::open(dev.clone() as Device, ro)?;
        let m = Model::from_fs(&fs)?;
        drop(fs);
        m
    };
    let rec = Arc::new(Recorder::new(dev.clone() as Device));
    let log: Mutex<Vec<RecordedOp>> = Mutex::new(Vec::new());
    let pos = || {
        let mut l = log.lock();
        l.extend(rec.take_log().ops);
        l.len()
    };
    rec.set_enabled(false);
    let fs = Fs::open(rec.clone() as Device, opts.clone())?;
    let base = Arc::new(dev.image_bytes());
    rec.set_enabled(true);
    let mut results = Vec::new();
    let fail =
        |op: &Op, e: cjfs_fs::FsError| CrashError::Workload(format!("`{}` failed: {e}", op.describe()));
    type Ran = (OpMark, Result<Option<u32>, cjfs_fs::FsError>);
    let panicked =
        || -> Ran { (OpMark { start: 0, end: 0 }, Err(cjfs_fs::FsError::Invalid("thread panicked".into()))) };
    let run = |op: &Op| -> Ran {
        let start = pos();
        let r = exec(&fs, op);
        (OpMark { start, end: pos() }, r)
    };
    // With several logs, thread `t` runs on core `t` (of the cores there are), so the
    // threads of a round join different logs and their transactions chain across logs.
    let pin = opts.journal.logs.wanted() > 1;
    // Per round, per thread: what each operation did.
    let ran: Vec<Vec<Ran>> = if wl.free_running {
        let width = wl.rounds.first().map_or(0, Vec::len);
        if wl.rounds.iter().any(|r| r.len() != width) {
            return Err(CrashError::Workload("a free-running workload's rounds differ in width".into()));
        }
        // Each thread runs its column and stops at its first error.
        let columns: Vec<Vec<Ran>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..width)
                .map(|t| {
                    let run = &run;
                    s.spawn(move || {
                        if pin {
                            pin_to_core(t);
                        }
                        let mut out = Vec::new();
                        for round in &wl.rounds {
                            let r = run(&round[t]);
                            let failed = r.1.is_err();
                            out.push(r);
                            if failed {
                                break;
                            }
                        }
                        out
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| vec![panicked()])).collect()
        });
        let mut columns: Vec<std::vec::IntoIter<Ran>> = columns.into_iter().map(Vec::into_iter).collect();
        wl.rounds
            .iter()
            .map(|round| {
                columns
                    .iter_mut()
                    .zip(round)
                    .map(|(c, op)| {
                        c.next().unwrap_or_else(|| {
                            let why = format!(
                                "`{}` not run: an earlier operation of its thread failed",
                                op.describe()
                            );
                            (OpMark { start: 0, end: 0 }, Err(cjfs_fs::FsError::Invalid(why)))
                        })
                    })
                    .collect()
            })
            .collect()
    } else {
        let mut ran = Vec::new();
        for round in &wl.rounds {
            let rr: Vec<Ran> = if round.len() == 1 {
                vec![run(&round[0])]
            } else {
                std::thread::scope(|s| {
                    let hs: Vec<_> = round
                        .iter()
                        .enumerate()
                        .map(|(t, op)| {
                            let run = &run;
                            s.spawn(move || {
                                if pin {
                                    pin_to_core(t);
                                }
                                run(op)
                            })
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap_or_else(|_| panicked())).collect()
                })
            };
            let failed = rr.iter().any(|r| r.1.is_err());
            ran.push(rr);
            if failed {
                break;
            }
        }
        ran
    };
    for (round, rr) in wl.rounds.iter().zip(ran) {
        for (op, (mark, r)) in round.iter().zip(rr) {
            let ino = r.map_err(|e| fail(op, e))?;
            results.push(OpResult { ino, mark });
        }
    }
    let ijournal = fs.ijournal_stats();
    let start = pos();
    fs.unmount().map_err(|e| fail(&Op::Unmount, e))?;
    let end = pos();
    results.push(OpResult { ino: None, mark: OpMark { start, end } });
    rec.set_enabled(false);
    let (ops, marks, history) = assemble(wl, model, &results)?;
    Ok(Recording { base, log: log.into_inner(), results, ops, marks, history, ijournal })
}
