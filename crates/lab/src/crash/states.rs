//! Crash state generation from a recorded log.
//!
//! # Durability model
//!
//! A write is **durable** once a flush that *started after the write completed* has
//! completed, or, for a FUA write, once it completed. The recorder logs a completion when
//! the writer waited for the write, so a write nobody waited for before a flush started is
//! not made durable by that flush (the writer could not know it had completed). A write
//! that is not durable at the crash may or may not be on the image. A **barrier** orders:
//! no write submitted after it persists unless every write submitted before it did.
//!
//! # Crash points and states
//!
//! The crash points are the positions of every completed flush, of every FUA completion
//! (the persistence points) and the end of the log; the crash is taken *just before* that
//! event completes, which is the latest moment with the same durable set, so every
//! persistence call that returned before it is held to its promise. At a crash point:
//!
//! * **epoch subsets**: the durable writes plus any subset of the writes in flight (every
//!   subset when there are at most [`StateOptions::exhaustive_limit`], seeded random subsets
//!   and every in-order prefix beyond), barrier order respected;
//! * **torn writes**: the in-flight writes before one write `w`, plus `w` torn — only some
//!   of its 512-byte sectors reached the medium. A multi-block write is one command, torn
//!   anywhere inside at sector granularity: a prefix of its blocks (the likely case), and
//!   sector subsets that are not prefixes — its last block without the others (a commit
//!   block persisted before the transaction it closes), every block but one in the middle,
//!   its first block short of a sector, and seeded random sector subsets. Commit blocks,
//!   whole-transaction writes (the single-I/O commit), journal superblocks and file system
//!   superblocks are always torn; other writes by seeded sample.
//!
//! One tear is outside the model: inside the primary ext4 superblock (device bytes
//! 1024..2048, two sectors). The format keeps every field that changes in place (state,
//! features, counts, the orphan head) in its first sector and the checksum in its second,
//! so no ext4 implementation survives that tear: the kernel refuses the image and e2fsck
//! restores it from a backup. The device is assumed to write those 1024 bytes atomically,
//! as ext4 does; a tear keeps both sectors or neither. (With 4 KiB blocks the sector masks
//! sampled never split them anyway; with 1 KiB blocks the superblock is a block of its own.)
//!
//! States are described by [`StateDesc`] (serializable, refers to writes by their log
//! position) and deduplicated by a hash of the resulting image.

use std::collections::{BTreeMap, HashMap};

use cjfs_blockdev::{BlockBuf, BlockKind, RecordedOp, TxId};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::oracle::hash64;

/// One write of the log.
#[derive(Debug, Clone)]
pub struct LogWrite {
    /// Log position of the submission.
    pub pos: usize,
    /// First block.
    pub block: u64,
    /// Contents.
    pub bufs: Vec<BlockBuf>,
    /// Block kind.
    pub kind: BlockKind,
    /// Journal transaction (log and id).
    pub tx: Option<TxId>,
    /// FUA.
    pub fua: bool,
    /// Log position of its completion (if waited for).
    pub done: Option<usize>,
    /// It completed with an error (never on the medium as far as the writer knows).
    pub failed: bool,
    /// Log position of the event that made it durable (flush or its own completion).
    pub durable: Option<usize>,
    /// Content hash of each block.
    pub hashes: Vec<u64>,
}

/// A parsed log.
#[derive(Debug, Clone, Default)]
pub struct ParsedLog {
    /// Writes in submission order.
    pub writes: Vec<LogWrite>,
    /// Positions of completed barriers.
    pub barriers: Vec<usize>,
    /// Crash points (increasing).
    pub points: Vec<usize>,
    /// Log length.
    pub len: usize,
}

/// `mask` (sectors of block `b`, blocks of `bs` bytes) with the two sectors of the primary
/// superblock (device bytes 1024..2048) both kept or both dropped, as the first of them is
/// (see the module documentation).
fn superblock_atomic(mask: u8, b: u64, bs: usize) -> u8 {
    let start = b as usize * bs;
    if start > 1024 || start + bs < 2048 {
        return mask;
    }
    let lo = (1024 - start) / 512;
    if mask >> lo & 1 == 1 { mask | 1 << (lo + 1) } else { mask & !(1 << (lo + 1)) }
}

/// The mask of every 512-byte sector of a block of `block_size` bytes (at most 8).
fn sector_mask(block_size: usize) -> u8 {
    let n = (block_size / 512).min(8);
    if n >= 8 { u8::MAX } else { (1u8 << n) - 1 }
}

impl ParsedLog {
    /// The block size of the logged writes (4096 for a log without writes).
    pub fn block_size(&self) -> usize {
        self.writes
            .iter()
            .find_map(|w| w.bufs.first().map(|b| b.len()))
            .unwrap_or(cjfs_blockdev::DEFAULT_BLOCK_SIZE)
    }

    /// Parse a recorder log.
    pub fn parse(log: &[RecordedOp]) -> ParsedLog {
        let mut p = ParsedLog { len: log.len(), ..ParsedLog::default() };
        let mut by_seq: HashMap<u64, usize> = HashMap::new();
        // Flush starts not yet completed: sequence number → log position.
        let mut starts: BTreeMap<u64, usize> = BTreeMap::new();
        for (pos, op) in log.iter().enumerate() {
            match op {
                RecordedOp::Write { seq, block, bufs, tag, fua } => {
                    by_seq.insert(*seq, p.writes.len());
                    p.writes.push(LogWrite {
                        pos,
                        block: *block,
                        bufs: bufs.clone(),
                        kind: tag.kind,
                        tx: tag.tx,
                        fua: *fua,
                        done: None,
                        failed: false,
                        durable: None,
                        hashes: bufs.iter().map(|b| hash64(&b[..])).collect(),
                    });
                }
                RecordedOp::WriteDone { write_seq, ok, .. } => {
                    if let Some(&i) = by_seq.get(write_seq) {
                        let w = &mut p.writes[i];
                        if !*ok {
                            w.failed = true;
                            continue;
                        }
                        w.done = Some(pos);
                        if w.fua {
                            w.durable = Some(pos);
                            p.points.push(pos);
                        }
                    }
                }
                RecordedOp::FlushStart { seq } => {
                    starts.insert(*seq, pos);
                }
                RecordedOp::Flush { ok, start, .. } => {
                    // Its own start; a recording without it pairs it with the latest one.
                    let fs = match start {
                        Some(s) => starts.remove(s),
                        None => starts.pop_last().map(|(_, p)| p),
                    };
                    if *ok && let Some(fs) = fs {
                        for w in &mut p.writes {
                            if w.durable.is_none() && w.done.is_some_and(|d| d < fs) {
                                w.durable = Some(pos);
                            }
                        }
                        p.points.push(pos);
                    }
                }
                RecordedOp::Barrier { .. } => p.barriers.push(pos),
            }
        }
        p.points.push(p.len);
        p.points.sort_unstable();
        p.points.dedup();
        p
    }

    /// Index of the write submitted at log position `pos`.
    pub fn write_at(&self, pos: usize) -> Option<usize> {
        self.writes.binary_search_by_key(&pos, |w| w.pos).ok()
    }

    /// Writes durable before crash point `x`, and writes in flight (submitted, not durable).
    ///
    /// A barrier orders persistence, so a write durable at `x` that was submitted after a
    /// barrier makes every write submitted before that barrier durable too (except failed
    /// ones): without this, states no barrier device can produce (a commit block on the
    /// medium, data submitted before its barrier not) would be checked.
    pub fn split(&self, x: usize) -> (Vec<usize>, Vec<usize>) {
        let mut durable = Vec::new();
        let mut pending = Vec::new();
        for (i, w) in self.writes.iter().enumerate() {
            if w.pos >= x {
                break;
            }
            if w.durable.is_some_and(|d| d < x) {
                durable.push(i);
            } else {
                pending.push(i);
            }
        }
        let last = durable.last().map(|&i| self.writes[i].pos);
        if let Some(b) = last.and_then(|l| self.barriers.iter().rev().find(|&&b| b < l).copied()) {
            let (before, after): (Vec<usize>, Vec<usize>) =
                pending.into_iter().partition(|&i| self.writes[i].pos < b && !self.writes[i].failed);
            pending = after;
            durable.extend(before);
            durable.sort_unstable();
        }
        (durable, pending)
    }

    /// The transactions of the journal writes in flight (submitted, not durable) at crash
    /// point `x`, deduplicated.
    fn journal_txs_in_flight(&self, x: usize) -> Vec<TxId> {
        let (_, pending) = self.split(x);
        let mut txs: Vec<TxId> = pending
            .iter()
            .map(|&i| &self.writes[i])
            .filter(|w| {
                matches!(
                    w.kind,
                    BlockKind::JournalDescriptor
                        | BlockKind::JournalLogged
                        | BlockKind::JournalCommit
                        | BlockKind::JournalRevoke
                        | BlockKind::JournalTransaction
                )
            })
            .filter_map(|w| w.tx)
            .collect();
        txs.sort_unstable_by_key(|t| (t.log, t.tid));
        txs.dedup();
        txs
    }

    /// Journal transactions with log writes in flight at crash point `x`: 2 or more means
    /// several transactions were committing when the crash hit.
    pub fn txs_in_flight(&self, x: usize) -> usize {
        self.journal_txs_in_flight(x).len()
    }

    /// Logs with log writes in flight at crash point `x` (per-core journaling: 2 or more
    /// means a crash may keep one log's commit and lose another's).
    pub fn logs_in_flight(&self, x: usize) -> usize {
        let mut logs: Vec<u16> = self.journal_txs_in_flight(x).iter().map(|t| t.log).collect();
        logs.dedup();
        logs.len()
    }

    /// Whether a subset of the in-flight writes respects barrier order.
    fn barrier_ok(&self, pending: &[usize], chosen: &[bool]) -> bool {
        for &b in &self.barriers {
            let after = pending.iter().zip(chosen).any(|(&i, &c)| c && self.writes[i].pos > b);
            if after && pending.iter().zip(chosen).any(|(&i, &c)| !c && self.writes[i].pos < b) {
                return false;
            }
        }
        true
    }

    /// Close a subset under barrier order (add everything before the latest barrier that
    /// precedes a chosen write).
    fn barrier_close(&self, pending: &[usize], chosen: &mut [bool]) {
        let last_chosen =
            pending.iter().zip(chosen.iter()).filter(|(_, c)| **c).map(|(&i, _)| self.writes[i].pos).max();
        let Some(last) = last_chosen else { return };
        if let Some(&b) = self.barriers.iter().rev().find(|&&b| b < last) {
            for (k, &i) in pending.iter().enumerate() {
                if self.writes[i].pos < b {
                    chosen[k] = true;
                }
            }
        }
    }
}

/// How a write was torn.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tear {
    /// Log position of the torn write.
    pub write: usize,
    /// Blocks of it that reached the medium whole (a prefix).
    pub blocks: u32,
    /// Sectors of the next block that reached it (bit mask; 0 = none).
    pub sectors: u8,
    /// A tear that is not a prefix: for each block of the write, the sectors that reached
    /// the medium (bit mask; `blocks` and `sectors` are then unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask: Option<Vec<u8>>,
}

impl Tear {
    /// The sectors of each of the write's `nb` blocks that reached the medium (`full` is
    /// every sector of a block).
    pub fn sectors_per_block(&self, nb: usize, full: u8) -> Vec<u8> {
        match &self.mask {
            Some(m) => (0..nb).map(|k| m.get(k).copied().unwrap_or(0) & full).collect(),
            None => (0..nb)
                .map(|k| match k.cmp(&(self.blocks as usize)) {
                    std::cmp::Ordering::Less => full,
                    std::cmp::Ordering::Equal => self.sectors & full,
                    std::cmp::Ordering::Greater => 0,
                })
                .collect(),
        }
    }
}

/// A crash state, reproducible from the same log.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateDesc {
    /// The crash point (log position; the crash is just before that event completes).
    pub point: usize,
    /// Log positions of the in-flight writes that reached the medium whole.
    pub persisted: Vec<usize>,
    /// A torn write, if any.
    pub torn: Option<Tear>,
    /// How the state was chosen: `persistence-point`, `subset`, `prefix`, `random`, `torn`.
    pub how: String,
}

impl StateDesc {
    /// One-line description.
    pub fn describe(&self, log: &ParsedLog) -> String {
        let name = |pos: usize| match log.write_at(pos) {
            Some(i) => {
                let w = &log.writes[i];
                let tx = w.tx.map(|t| format!(" tx {t}")).unwrap_or_default();
                format!("@{pos} {:?}{tx} block {}+{}", w.kind, w.block, w.bufs.len())
            }
            None => format!("@{pos} (not a write)"),
        };
        let (_, pending) = log.split(self.point);
        let mut s = format!(
            "crash before log event {} ({}); {} write(s) in flight, {} persisted",
            self.point,
            self.how,
            pending.len(),
            self.persisted.len()
        );
        if !self.persisted.is_empty() && self.persisted.len() <= 8 {
            let names: Vec<String> = self.persisted.iter().map(|&p| name(p)).collect();
            s.push_str(&format!(": {}", names.join(", ")));
        }
        if let Some(t) = &self.torn {
            match &t.mask {
                None => s.push_str(&format!(
                    "; torn: {} ({} whole block(s), sectors {:08b} of the next)",
                    name(t.write),
                    t.blocks,
                    t.sectors
                )),
                Some(m) => {
                    let per: Vec<String> = m.iter().map(|b| format!("{b:08b}")).collect();
                    s.push_str(&format!("; torn: {} (sectors per block {})", name(t.write), per.join(" ")));
                }
            }
        }
        s
    }
}

/// Knobs for state generation.
#[derive(Debug, Clone)]
pub struct StateOptions {
    /// Enumerate every subset of the in-flight writes up to this many (the 12).
    pub exhaustive_limit: usize,
    /// Random subsets per crash point beyond the limit.
    pub random_subsets: usize,
    /// Torn variants of ordinary (not commit/superblock) writes per crash point.
    pub torn_sample: usize,
    /// Cap on states per log (persistence points, torn commit/superblock states and
    /// in-order prefixes are kept first; the rest is sampled). 0 = no cap.
    pub max_states: usize,
    /// Seed.
    pub seed: u64,
}

impl Default for StateOptions {
    fn default() -> Self {
        StateOptions { exhaustive_limit: 12, random_subsets: 32, torn_sample: 2, max_states: 0, seed: 1 }
    }
}

fn important(kind: BlockKind) -> bool {
    matches!(
        kind,
        BlockKind::JournalCommit
            | BlockKind::JournalSuper
            | BlockKind::Superblock
            | BlockKind::JournalTransaction
    )
}

/// Tears of a write of `nb` blocks (`all`: the sector mask of a whole block) that are not
/// prefixes: the last block alone, every block but a middle one, the first block short of
/// its last sector, and `random` seeded sector subsets.
fn scattered_tears(nb: usize, all: u8, random: usize, rng: &mut StdRng) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if nb < 2 {
        return out;
    }
    let mut last_only = vec![0u8; nb];
    last_only[nb - 1] = all;
    out.push(last_only);
    let mut hole = vec![all; nb];
    hole[nb / 2] = 0;
    out.push(hole);
    let mut first_short = vec![all; nb];
    first_short[0] = all & !(1u8 << (all.count_ones() - 1));
    out.push(first_short);
    for _ in 0..random {
        let m: Vec<u8> = (0..nb).map(|_| rng.r#gen::<u8>() & all).collect();
        if m.iter().any(|&b| b != all) && m.iter().any(|&b| b != 0) {
            out.push(m);
        }
    }
    out
}

/// Every crash state of `log` (see the module docs). The first of each crash point is its
/// persistence-point state (nothing in flight persisted).
pub fn generate(log: &ParsedLog, o: &StateOptions) -> Vec<StateDesc> {
    let mut rng = StdRng::seed_from_u64(o.seed);
    let mut prio: Vec<StateDesc> = Vec::new();
    let mut rest: Vec<StateDesc> = Vec::new();
    for &x in &log.points {
        let (_, pending) = log.split(x);
        let n = pending.len();
        let mk = |chosen: &[bool], how: &str| StateDesc {
            point: x,
            persisted: pending
                .iter()
                .zip(chosen)
                .filter(|(_, c)| **c)
                .map(|(&i, _)| log.writes[i].pos)
                .collect(),
            torn: None,
            how: how.to_string(),
        };
        prio.push(mk(&vec![false; n], "persistence-point"));
        if n == 0 {
            continue;
        }
        // In-order prefixes (the most likely states) are priority states.
        for k in 1..=n {
            let chosen: Vec<bool> = (0..n).map(|j| j < k).collect();
            prio.push(mk(&chosen, "prefix"));
        }
        if n <= o.exhaustive_limit {
            for mask in 1u64..(1u64 << n) {
                let chosen: Vec<bool> = (0..n).map(|j| mask >> j & 1 == 1).collect();
                // Prefixes were added already.
                let is_prefix = (mask + 1).is_power_of_two();
                if !is_prefix && log.barrier_ok(&pending, &chosen) {
                    rest.push(mk(&chosen, "subset"));
                }
            }
        } else {
            for _ in 0..o.random_subsets {
                let p: f64 = rng.gen_range(0.2..0.9);
                let mut chosen: Vec<bool> = (0..n).map(|_| rng.gen_bool(p)).collect();
                log.barrier_close(&pending, &mut chosen);
                rest.push(mk(&chosen, "random"));
            }
        }
        // Torn writes.
        let mut torn_targets: Vec<usize> = (0..n)
            .filter(|&k| important(log.writes[pending[k]].kind) || log.writes[pending[k]].bufs.len() > 1)
            .collect();
        let mut others: Vec<usize> = (0..n).filter(|k| !torn_targets.contains(k)).collect();
        others.shuffle(&mut rng);
        torn_targets.extend(others.into_iter().take(o.torn_sample));
        for k in torn_targets {
            let w = &log.writes[pending[k]];
            let before: Vec<bool> = (0..n).map(|j| j < k).collect();
            let base = mk(&before, "torn");
            let nb = w.bufs.len() as u32;
            let mut tears: Vec<(u32, u8)> = Vec::new();
            // Sector masks beyond the block's sectors (small blocks) are cut to them.
            let all = sector_mask(w.bufs.first().map_or(0, |b| b.len()));
            let all_sectors = all;
            if nb == 1 {
                for s in [0b0000_0001u8, 0b0000_1111, 0b0111_1111, 0b1111_0000] {
                    tears.push((0, s & all));
                }
            } else {
                for b in [1, nb / 2, nb - 1] {
                    tears.push((b, 0));
                }
                tears.push((nb / 2, 0b0000_1111 & all));
            }
            tears.sort_unstable();
            tears.dedup();
            let mut torn: Vec<Tear> = tears
                .into_iter()
                .map(|(blocks, sectors)| Tear { write: w.pos, blocks, sectors, mask: None })
                .collect();
            let random = if important(w.kind) { 2 } else { 0 };
            for m in scattered_tears(nb as usize, all, random, &mut rng) {
                torn.push(Tear { write: w.pos, blocks: 0, sectors: 0, mask: Some(m) });
            }
            // A whole-transaction write torn inside while every later write in flight
            // reached the medium (where barriers allow): a valid commit after a torn one,
            // which recovery must never meet unless the writer let them overlap.
            let later = if w.kind == BlockKind::JournalTransaction && k + 1 < n {
                let mut all: Vec<bool> = (0..n).map(|j| j != k).collect();
                all[k] = false;
                log.barrier_ok(&pending, &all).then(|| {
                    let mut d = mk(&all, "torn");
                    let mut hole = vec![all_sectors; nb as usize];
                    hole[nb as usize / 2] = 0;
                    d.torn = Some(Tear { write: w.pos, blocks: 0, sectors: 0, mask: Some(hole) });
                    d
                })
            } else {
                None
            };
            for t in torn {
                let mut d = base.clone();
                d.torn = Some(t);
                if important(w.kind) {
                    prio.push(d);
                } else {
                    rest.push(d);
                }
            }
            prio.extend(later);
        }
    }
    if o.max_states > 0 && prio.len() + rest.len() > o.max_states {
        let keep = o.max_states.saturating_sub(prio.len());
        rest.shuffle(&mut rng);
        rest.truncate(keep);
        if prio.len() > o.max_states {
            // Keep the persistence points first, then sample the other priority states.
            let (mut pp, mut other): (Vec<_>, Vec<_>) =
                prio.into_iter().partition(|d| d.how == "persistence-point");
            other.shuffle(&mut rng);
            pp.truncate(o.max_states);
            let room = o.max_states - pp.len();
            other.truncate(room);
            pp.extend(other);
            prio = pp;
        }
    }
    prio.extend(rest);
    prio
}

/// The image of a crash state, as block overrides of the base image.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    /// Block → content (only blocks differing from the base).
    pub blocks: BTreeMap<u64, BlockBuf>,
    /// Hash of the resulting image (relative to the same base).
    pub hash: u64,
}

/// Build the overlay of `d` over `base`. Fails if the description does not fit the log.
pub fn overlay(log: &ParsedLog, base: &[u8], d: &StateDesc) -> Result<Overlay, String> {
    let (durable, _) = log.split(d.point);
    let mut chosen: Vec<usize> = durable;
    for &p in &d.persisted {
        chosen.push(log.write_at(p).ok_or_else(|| format!("no write at log position {p}"))?);
    }
    let torn = match &d.torn {
        Some(t) => Some((
            log.write_at(t.write).ok_or_else(|| format!("no write at log position {}", t.write))?,
            t.clone(),
        )),
        None => None,
    };
    if let Some((i, _)) = torn {
        chosen.push(i);
    }
    chosen.sort_unstable();
    chosen.dedup();
    let mut blocks: BTreeMap<u64, (BlockBuf, u64)> = BTreeMap::new();
    let bs = log.block_size();
    let block_of = |blocks: &BTreeMap<u64, (BlockBuf, u64)>, b: u64| -> Vec<u8> {
        match blocks.get(&b) {
            Some((buf, _)) => buf.to_vec(),
            None => {
                let off = b as usize * bs;
                base.get(off..off + bs).map_or_else(|| vec![0; bs], <[u8]>::to_vec)
            }
        }
    };
    let full = sector_mask(bs);
    for i in chosen {
        let w = &log.writes[i];
        let per = match &torn {
            Some((ti, t)) if *ti == i => t.sectors_per_block(w.bufs.len(), full),
            _ => vec![full; w.bufs.len()],
        };
        for (k, &mask) in per.iter().enumerate() {
            let b = w.block + k as u64;
            if mask == full {
                blocks.insert(b, (w.bufs[k].clone(), w.hashes[k]));
                continue;
            }
            let mask = superblock_atomic(mask, b, bs);
            if mask == 0 {
                continue;
            }
            let mut cur = block_of(&blocks, b);
            for s in 0..(bs / 512) as u8 {
                if mask >> s & 1 == 1 {
                    let r = s as usize * 512..(s as usize + 1) * 512;
                    cur[r.clone()].copy_from_slice(&w.bufs[k][r]);
                }
            }
            let h = hash64(&cur);
            blocks.insert(b, (cjfs_blockdev::block_from_slice(&cur), h));
        }
    }
    // Drop blocks equal to the base and hash the rest.
    let mut out = Overlay::default();
    let mut hv = Vec::with_capacity(blocks.len() * 16);
    for (b, (buf, h)) in blocks {
        let off = b as usize * bs;
        if let Some(orig) = base.get(off..off + bs)
            && orig == &buf[..]
        {
            continue;
        }
        hv.extend_from_slice(&b.to_le_bytes());
        hv.extend_from_slice(&h.to_le_bytes());
        out.blocks.insert(b, buf);
    }
    out.hash = hash64(&hv);
    Ok(out)
}

/// Apply an overlay to a copy of the base image (the copy-on-write device avoids this).
pub fn materialize(base: &[u8], ov: &Overlay) -> Vec<u8> {
    let mut img = base.to_vec();
    for (&b, buf) in &ov.blocks {
        let off = b as usize * buf.len();
        if let Some(dst) = img.get_mut(off..off + buf.len()) {
            dst.copy_from_slice(&buf[..]);
        }
    }
    img
}

#[cfg(test)]
mod tests {
    use super::*;
    use cjfs_blockdev::{WriteTag, block_from_slice};

    const BLOCK_SIZE: usize = cjfs_blockdev::DEFAULT_BLOCK_SIZE;

    fn w(seq: u64, block: u64, fua: bool) -> RecordedOp {
        RecordedOp::Write {
            seq,
            block,
            bufs: vec![block_from_slice(&[seq as u8 + 1; BLOCK_SIZE])],
            tag: WriteTag::default(),
            fua,
        }
    }
    fn done(seq: u64, write_seq: u64) -> RecordedOp {
        RecordedOp::WriteDone { seq, write_seq, ok: true }
    }

    #[test]
    fn durability_needs_completion_before_the_flush_started() {
        // W0 completes before the flush starts, W1 after: only W0 is made durable.
        let log = vec![
            w(0, 1, false),
            done(1, 0),
            w(2, 2, false),
            RecordedOp::FlushStart { seq: 3 },
            done(4, 2),
            RecordedOp::Flush { seq: 5, start: Some(3), ok: true },
            w(6, 3, true),
            done(7, 6),
        ];
        let p = ParsedLog::parse(&log);
        assert_eq!(p.writes[0].durable, Some(5));
        assert_eq!(p.writes[1].durable, None);
        assert_eq!(p.writes[2].durable, Some(7), "FUA is durable on completion");
        assert_eq!(p.points, vec![5, 7, 8]);
        // Just before the flush completes nothing is durable; after it, W0 is.
        assert_eq!(p.split(5), (vec![], vec![0, 1]));
        assert_eq!(p.split(8), (vec![0, 2], vec![1]));
    }

    #[test]
    fn overlapping_flushes_each_cover_what_completed_before_their_own_start() {
        // F1 starts, W1 completes, F2 starts, F1 returns, F2 returns: F1 makes only W0
        // durable (W1 completed after it started); F2 makes W1 durable.
        let log = vec![
            w(0, 1, false),
            done(1, 0),
            w(2, 2, false),
            RecordedOp::FlushStart { seq: 3 },
            done(4, 2),
            RecordedOp::FlushStart { seq: 5 },
            RecordedOp::Flush { seq: 6, start: Some(3), ok: true },
            RecordedOp::Flush { seq: 7, start: Some(5), ok: true },
        ];
        let p = ParsedLog::parse(&log);
        assert_eq!(p.writes[0].durable, Some(6));
        assert_eq!(p.writes[1].durable, Some(7));
        assert_eq!(p.points, vec![6, 7, 8]);
        // An old recording (no start named) pairs each flush with the latest start.
        let mut old = log.clone();
        old[6] = RecordedOp::Flush { seq: 6, start: None, ok: true };
        old[7] = RecordedOp::Flush { seq: 7, start: None, ok: true };
        let p = ParsedLog::parse(&old);
        assert_eq!((p.writes[0].durable, p.writes[1].durable), (Some(6), Some(6)));
    }

    #[test]
    fn a_durable_write_after_a_barrier_makes_every_write_before_it_durable() {
        // W0 (never waited for), barrier, W1 (FUA, durable on completion): at any crash
        // after W1 completed, W0 is on the medium too; the failed W2 is not forced.
        let log = vec![
            w(0, 1, false),
            w(1, 4, false),
            done(2, 1),
            RecordedOp::WriteDone { seq: 3, write_seq: 1, ok: false },
            RecordedOp::Barrier { seq: 4 },
            w(5, 2, true),
            done(6, 5),
            w(7, 3, false),
        ];
        let p = ParsedLog::parse(&log);
        assert_eq!(p.split(6), (vec![], vec![0, 1, 2]), "before W1 completes nothing is forced");
        assert_eq!(p.split(8), (vec![0, 2], vec![1, 3]));
    }

    #[test]
    fn subsets_respect_barriers_and_tears_are_generated() {
        let log = vec![w(0, 1, false), w(1, 2, false), RecordedOp::Barrier { seq: 2 }, w(3, 3, false)];
        let p = ParsedLog::parse(&log);
        let pending = vec![0, 1, 2];
        assert!(p.barrier_ok(&pending, &[true, true, true]));
        assert!(p.barrier_ok(&pending, &[true, false, false]));
        assert!(!p.barrier_ok(&pending, &[false, true, true]), "after the barrier without all before it");
        let states = generate(&p, &StateOptions { torn_sample: 0, ..StateOptions::default() });
        // One crash point (end of log): the persistence point, 3 prefixes, and the other
        // subsets that respect the barrier ({W1}; {W0,W1,W2} is a prefix; {W2}, {W0,W2},
        // {W1,W2} are excluded).
        let subsets: Vec<&StateDesc> = states.iter().filter(|d| d.torn.is_none()).collect();
        assert_eq!(subsets.len(), 1 + 3 + 1, "{subsets:?}");
        let ov = overlay(&p, &vec![0u8; 8 * BLOCK_SIZE], subsets[2]).expect("overlay");
        assert_eq!(ov.blocks.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        // A torn single-block write keeps only some sectors.
        let mut d = subsets[0].clone();
        d.torn = Some(Tear { write: 0, blocks: 0, sectors: 0b0000_0001, mask: None });
        let ov = overlay(&p, &vec![0u8; 8 * BLOCK_SIZE], &d).expect("overlay");
        let b = &ov.blocks[&1];
        assert!(b[..512].iter().all(|&x| x == 1) && b[512..].iter().all(|&x| x == 0));
    }

    #[test]
    fn a_multi_block_write_is_one_command_torn_anywhere_at_sector_granularity() {
        // One write of four blocks (a whole transaction), in flight at the end of the log.
        let log = vec![RecordedOp::Write {
            seq: 0,
            block: 2,
            bufs: (1..=4u8).map(|v| block_from_slice(&[v; BLOCK_SIZE])).collect(),
            tag: WriteTag::tx(BlockKind::JournalTransaction, TxId::new(0, 7)),
            fua: false,
        }];
        let p = ParsedLog::parse(&log);
        assert_eq!(p.writes.len(), 1, "one command");
        assert_eq!(p.txs_in_flight(p.len), 1);
        let states = generate(&p, &StateOptions::default());
        let masks: Vec<Vec<u8>> =
            states.iter().filter_map(|d| d.torn.as_ref()).map(|t| t.sectors_per_block(4, 0xff)).collect();
        // The commit block (last) without the body, a hole in the middle, a short first
        // block, and prefixes are all among the tears.
        assert!(masks.contains(&vec![0, 0, 0, 0xff]), "{masks:?}");
        assert!(masks.contains(&vec![0xff, 0xff, 0, 0xff]), "{masks:?}");
        assert!(masks.contains(&vec![0x7f, 0xff, 0xff, 0xff]), "{masks:?}");
        assert!(masks.contains(&vec![0xff, 0, 0, 0]), "{masks:?}");
        // The overlay of "last block only" holds block 5 and nothing of blocks 2..=4.
        let d = states
            .iter()
            .find(|d| d.torn.as_ref().is_some_and(|t| t.sectors_per_block(4, 0xff) == vec![0, 0, 0, 0xff]))
            .expect("last-only tear");
        let ov = overlay(&p, &vec![0u8; 8 * BLOCK_SIZE], d).expect("overlay");
        assert_eq!(ov.blocks.keys().copied().collect::<Vec<_>>(), vec![5]);
        // A sector-level tear keeps exactly its sectors.
        let mut d = d.clone();
        d.torn = Some(Tear { write: 0, blocks: 0, sectors: 0, mask: Some(vec![0b1000_0001, 0, 0, 0]) });
        let ov = overlay(&p, &vec![0u8; 8 * BLOCK_SIZE], &d).expect("overlay");
        let b = &ov.blocks[&2];
        assert!(b[..512].iter().all(|&x| x == 1) && b[512..3584].iter().all(|&x| x == 0));
        assert!(b[3584..].iter().all(|&x| x == 1));
    }
}
