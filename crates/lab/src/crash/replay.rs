//! Failure files: a violation saved as a JSON file (mode, data mode, planted bugs, seed,
//! the workload's operations, the crash state, what was wrong, and the run's own recording)
//! that [`replay`] reproduces: it rebuilds the same crash state from the saved recording and
//! checks it again, printing the operation log and the differing fields.
//!
//! The recording is saved because concurrent workloads (the rounds of `mt8-*` and
//! `ij-ten-threads` run on real threads) record a different log every run; with it, the
//! exact crash image and the oracle's view of it (model order, log positions of every
//! operation) are rebuilt. Files without one (version 1) are replayed by recording the
//! workload again, which reproduces single-threaded workloads exactly (timer commits are off
//! in the harness); the replay says whether the log matched.
//!
//! # Format
//!
//! Version 2 (version 1 files, without `recording`, are still read). `recording` holds:
//!
//! * `ops`: per operation in workload order (round by round, thread order, then the
//!   unmount) the inode it created and its log positions; the oracle's model order and
//!   history are rebuilt from them ([`super::record::assemble`]);
//! * `data`: base64 of a deflate stream of the base image (as mounted) and the device log:
//!
//! ```text
//! "CJFR" u32:4  u64:image blocks  u32:block size  u32:N  N distinct non-zero blocks
//! u32:count  count × (u64:block  u32:content)                    non-zero base blocks
//! u32:count  count × event:
//!   u8:0 u64:seq u64:block u8:kind u8:has_tx u16:log u64:tid u8:fua u32:n  n × u32:content  write
//!   u8:1 u64:seq u64:write_seq u8:ok                                              write done
//!   u8:2 u64:seq                                                                 flush start
//!   u8:3 u64:seq u8:ok                                         flush (start not recorded)
//!   u8:5 u64:seq u64:start u8:ok                                   flush of the start `start`
//!   u8:4 u64:seq                                                                     barrier
//! ```
//!
//! little endian; `content` 0 is a zero block, `k` the `k`-th stored block. A write's
//! transaction is its log and its id in that log; binary version 1 (no `u16:log`, every
//! transaction in log 0) is still read. Versions before 4 have no tag 5: each flush there
//! is paired with the latest flush start before it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use cjfs_blockdev::{BlockBuf, BlockKind, DEFAULT_BLOCK_SIZE, RecordedOp, TxId, WriteTag};
use serde::{Deserialize, Serialize};

use super::oracle::hash64;
use super::record::{self, OpResult, Recording};
use super::states::ParsedLog;
use super::{BaseCache, Bugs, CrashConfig, CrashError, StateDesc, Violation, Workload, WorkloadResult};

/// Format version of failure files (version 1, without the recording, is still read).
pub const FAILURE_VERSION: u32 = 2;

/// Magic and version of the binary part of an [`EmbeddedRecording`].
const BIN_MAGIC: &[u8; 4] = b"CJFR";
const BIN_VERSION: u32 = 4;
/// Largest image an embedded recording may describe (blocks), and largest decoded size.
const MAX_IMAGE_BLOCKS: u64 = 1 << 20;
const MAX_DECODED: u64 = 1 << 30;

/// A saved violation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailureFile {
    /// Format version.
    pub version: u32,
    /// Journal preset.
    pub mode: String,
    /// Data mode (`ordered` or `journal`).
    pub data: String,
    /// Planted bugs in force.
    pub bugs: Bugs,
    /// Whether the crash device had a cache barrier (files written before this field: yes).
    #[serde(default = "has_barrier")]
    pub barrier: bool,
    /// Block size of the image (files written before this field: 4096).
    #[serde(default = "default_block_size")]
    pub block_size: usize,
    /// Run seed.
    pub seed: u64,
    /// The workload (setup and operations).
    pub workload: Workload,
    /// The operation log, one line each (for reading; `workload` is what is replayed).
    pub op_log: Vec<String>,
    /// The crash state.
    pub state: StateDesc,
    /// Its description.
    pub state_text: String,
    /// What was wrong.
    pub problems: Vec<String>,
    /// Fingerprint of the recorded log's shape.
    pub log_fingerprint: u64,
    /// The run's own recording (version 2; absent in version 1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<EmbeddedRecording>,
}

fn has_barrier() -> bool {
    true
}

fn default_block_size() -> usize {
    DEFAULT_BLOCK_SIZE
}

/// A recording as saved in a failure file (see the module docs for the format).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmbeddedRecording {
    /// Per operation in workload order (round by round, thread order, then the unmount):
    /// the inode it created and its log positions.
    pub ops: Vec<OpResult>,
    /// Log events.
    pub events: u32,
    /// Distinct non-zero blocks stored (of the base image and of the writes).
    pub distinct_blocks: u32,
    /// How `data` is encoded (`deflate+base64`).
    pub encoding: String,
    /// The base image and the device log (see the module docs).
    pub data: String,
}

/// Distinct non-zero blocks, by content.
#[derive(Default)]
struct BlockTable {
    blocks: Vec<BlockBuf>,
    by_hash: HashMap<u64, Vec<u32>>,
}

impl BlockTable {
    /// The content number of `b` (0: zeros; `k`: the `k`-th stored block).
    fn id(&mut self, b: &[u8]) -> u32 {
        if b.iter().all(|&x| x == 0) {
            return 0;
        }
        let ids = self.by_hash.entry(hash64(b)).or_default();
        if let Some(&k) = ids.iter().find(|&&k| self.blocks[k as usize - 1][..] == *b) {
            return k;
        }
        self.blocks.push(cjfs_blockdev::block_from_slice(b));
        let k = self.blocks.len() as u32;
        ids.push(k);
        k
    }
}

fn kind_code(k: BlockKind) -> u8 {
    match k {
        BlockKind::Unknown => 0,
        BlockKind::Data => 1,
        BlockKind::Metadata => 2,
        BlockKind::JournalSuper => 3,
        BlockKind::JournalDescriptor => 4,
        BlockKind::JournalLogged => 5,
        BlockKind::JournalCommit => 6,
        BlockKind::JournalRevoke => 7,
        BlockKind::Superblock => 8,
        BlockKind::Recovery => 9,
        BlockKind::JournalTransaction => 10,
    }
}

fn kind_of_code(c: u8) -> Result<BlockKind, CrashError> {
    Ok(match c {
        0 => BlockKind::Unknown,
        1 => BlockKind::Data,
        2 => BlockKind::Metadata,
        3 => BlockKind::JournalSuper,
        4 => BlockKind::JournalDescriptor,
        5 => BlockKind::JournalLogged,
        6 => BlockKind::JournalCommit,
        7 => BlockKind::JournalRevoke,
        8 => BlockKind::Superblock,
        9 => BlockKind::Recovery,
        10 => BlockKind::JournalTransaction,
        _ => return Err(bad(format!("unknown block kind {c}"))),
    })
}

fn bad(what: String) -> CrashError {
    CrashError::Replay(format!("embedded recording: {what}"))
}

/// A little-endian reader over the decoded bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], CrashError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| bad("truncated".into()))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, CrashError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, CrashError> {
        let mut w = [0u8; 2];
        w.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(w))
    }
    fn u32(&mut self) -> Result<u32, CrashError> {
        let mut w = [0u8; 4];
        w.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(w))
    }
    fn u64(&mut self) -> Result<u64, CrashError> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }
    fn flag(&mut self) -> Result<bool, CrashError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            x => Err(bad(format!("flag byte {x}"))),
        }
    }
}

impl EmbeddedRecording {
    /// Encode the base image and log of `rec`.
    pub fn new(rec: &Recording) -> Result<EmbeddedRecording, CrashError> {
        let mut table = BlockTable::default();
        let mut body = Vec::new();
        let put32 = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
        let put64 = |v: &mut Vec<u8>, x: u64| v.extend_from_slice(&x.to_le_bytes());
        let bs = super::memdev::image_block_size(&rec.base).unwrap_or(DEFAULT_BLOCK_SIZE);
        let base_blocks: Vec<(u64, u32)> = rec
            .base
            .chunks(bs)
            .enumerate()
            .map(|(b, c)| (b as u64, table.id(c)))
            .filter(|(_, id)| *id != 0)
            .collect();
        put32(&mut body, base_blocks.len() as u32);
        for (b, id) in base_blocks {
            put64(&mut body, b);
            put32(&mut body, id);
        }
        put32(&mut body, rec.log.len() as u32);
        for op in &rec.log {
            match op {
                RecordedOp::Write { seq, block, bufs, tag, fua } => {
                    body.push(0);
                    put64(&mut body, *seq);
                    put64(&mut body, *block);
                    body.push(kind_code(tag.kind));
                    let tx = tag.tx.unwrap_or_default();
                    body.push(u8::from(tag.tx.is_some()));
                    body.extend_from_slice(&tx.log.to_le_bytes());
                    put64(&mut body, tx.tid);
                    body.push(u8::from(*fua));
                    put32(&mut body, bufs.len() as u32);
                    for b in bufs {
                        let id = table.id(&b[..]);
                        put32(&mut body, id);
                    }
                }
                RecordedOp::WriteDone { seq, write_seq, ok } => {
                    body.push(1);
                    put64(&mut body, *seq);
                    put64(&mut body, *write_seq);
                    body.push(u8::from(*ok));
                }
                RecordedOp::FlushStart { seq } => {
                    body.push(2);
                    put64(&mut body, *seq);
                }
                RecordedOp::Flush { seq, start: None, ok } => {
                    body.push(3);
                    put64(&mut body, *seq);
                    body.push(u8::from(*ok));
                }
                RecordedOp::Flush { seq, start: Some(start), ok } => {
                    body.push(5);
                    put64(&mut body, *seq);
                    put64(&mut body, *start);
                    body.push(u8::from(*ok));
                }
                RecordedOp::Barrier { seq } => {
                    body.push(4);
                    put64(&mut body, *seq);
                }
            }
        }
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(BIN_MAGIC)?;
        z.write_all(&BIN_VERSION.to_le_bytes())?;
        z.write_all(&((rec.base.len() / bs) as u64).to_le_bytes())?;
        z.write_all(&(bs as u32).to_le_bytes())?;
        z.write_all(&(table.blocks.len() as u32).to_le_bytes())?;
        for b in &table.blocks {
            z.write_all(&b[..])?;
        }
        z.write_all(&body)?;
        let packed = z.finish()?;
        Ok(EmbeddedRecording {
            ops: rec.results.clone(),
            events: rec.log.len() as u32,
            distinct_blocks: table.blocks.len() as u32,
            encoding: "deflate+base64".into(),
            data: BASE64.encode(packed),
        })
    }

    /// Decode the base image and the device log.
    pub fn decode(&self) -> Result<(Arc<Vec<u8>>, Vec<RecordedOp>), CrashError> {
        if self.encoding != "deflate+base64" {
            return Err(bad(format!("unknown encoding {:?}", self.encoding)));
        }
        let packed = BASE64.decode(self.data.as_bytes()).map_err(|e| bad(format!("base64: {e}")))?;
        let mut raw = Vec::new();
        flate2::read::DeflateDecoder::new(&packed[..])
            .take(MAX_DECODED)
            .read_to_end(&mut raw)
            .map_err(|e| bad(format!("deflate: {e}")))?;
        let mut r = Reader { buf: &raw, pos: 0 };
        if r.take(4)? != BIN_MAGIC {
            return Err(bad("not a binary recording".into()));
        }
        let version = r.u32()?;
        if version == 0 || version > BIN_VERSION {
            return Err(bad(format!(
                "binary recording version {version}; this build reads 1 to {BIN_VERSION}"
            )));
        }
        let nblocks = r.u64()?;
        if nblocks == 0 || nblocks > MAX_IMAGE_BLOCKS {
            return Err(bad(format!("implausible image size of {nblocks} blocks")));
        }
        // Version 3 records the block size; earlier recordings are all of 4 KiB blocks.
        let bs = if version >= 3 { r.u32()? as usize } else { DEFAULT_BLOCK_SIZE };
        if !cjfs_blockdev::valid_block_size(bs) {
            return Err(bad(format!("block size {bs}")));
        }
        let ntable = r.u32()? as usize;
        let mut table: Vec<BlockBuf> = Vec::with_capacity(ntable.min(raw.len() / bs) + 1);
        table.push(cjfs_blockdev::zeroed_buf(bs));
        for _ in 0..ntable {
            table.push(cjfs_blockdev::block_from_slice(r.take(bs)?));
        }
        let content = |id: u32| -> Result<&BlockBuf, CrashError> {
            table.get(id as usize).ok_or_else(|| bad(format!("block content {id} of {ntable}")))
        };
        let in_image = |block: u64, n: u64| -> Result<(), CrashError> {
            if block.checked_add(n).is_none_or(|e| e > nblocks) {
                return Err(bad(format!("blocks {block}+{n} outside the {nblocks}-block image")));
            }
            Ok(())
        };
        let mut base = vec![0u8; nblocks as usize * bs];
        for _ in 0..r.u32()? {
            let (b, id) = (r.u64()?, r.u32()?);
            in_image(b, 1)?;
            let off = b as usize * bs;
            base[off..off + bs].copy_from_slice(&content(id)?[..]);
        }
        let nevents = r.u32()? as usize;
        let mut log = Vec::with_capacity(nevents.min(raw.len()));
        for _ in 0..nevents {
            let op = match r.u8()? {
                0 => {
                    let (seq, block) = (r.u64()?, r.u64()?);
                    let kind = kind_of_code(r.u8()?)?;
                    let has_tx = r.flag()?;
                    let log = if version >= 2 { r.u16()? } else { 0 };
                    let tid = r.u64()?;
                    let fua = r.flag()?;
                    let n = r.u32()?;
                    in_image(block, u64::from(n))?;
                    let bufs = (0..n).map(|_| content(r.u32()?).cloned()).collect::<Result<Vec<_>, _>>()?;
                    let tag = WriteTag { kind, tx: has_tx.then_some(TxId::new(log, tid)) };
                    RecordedOp::Write { seq, block, bufs, tag, fua }
                }
                1 => RecordedOp::WriteDone { seq: r.u64()?, write_seq: r.u64()?, ok: r.flag()? },
                2 => RecordedOp::FlushStart { seq: r.u64()? },
                3 => RecordedOp::Flush { seq: r.u64()?, start: None, ok: r.flag()? },
                5 => RecordedOp::Flush { seq: r.u64()?, start: Some(r.u64()?), ok: r.flag()? },
                4 => RecordedOp::Barrier { seq: r.u64()? },
                t => return Err(bad(format!("unknown event tag {t}"))),
            };
            log.push(op);
        }
        if r.pos != raw.len() {
            return Err(bad(format!("{} trailing bytes", raw.len() - r.pos)));
        }
        Ok((Arc::new(base), log))
    }

    /// Rebuild the recording of `wl` (run under `cfg`): the base image, the log, and the
    /// model order and history from the saved operation results.
    pub fn recording(&self, cfg: &CrashConfig, wl: &Workload) -> Result<Recording, CrashError> {
        let (base, log) = self.decode()?;
        let model = record::model_of(&cfg.mount_options()?, base.clone())?;
        let (ops, marks, history) = record::assemble(wl, model, &self.ops)?;
        Ok(Recording { base, log, results: self.ops.clone(), ops, marks, history, ijournal: None })
    }
}

/// A seed derived from a workload name (so each workload samples differently).
pub fn name_seed(name: &str) -> u64 {
    hash64(name.as_bytes())
}

fn op_log(wl: &Workload) -> Vec<String> {
    let mut v: Vec<String> = wl.setup.iter().map(|o| format!("setup: {}", o.describe())).collect();
    for (i, op) in wl.flat_ops().iter().enumerate() {
        v.push(format!("{i:3}: {}", op.describe()));
    }
    v
}

/// Save `v`, a violation found in `rec` (the run's recording of `wl`), as a failure file in
/// `dir`; returns its path.
pub fn save(
    dir: &Path,
    cfg: &CrashConfig,
    wl: &Workload,
    rec: &Recording,
    v: &Violation,
) -> Result<PathBuf, CrashError> {
    std::fs::create_dir_all(dir)?;
    let f = FailureFile {
        version: FAILURE_VERSION,
        mode: cfg.mode.clone(),
        data: format!("{:?}", cfg.data).to_lowercase(),
        bugs: cfg.bugs,
        barrier: cfg.check.barrier,
        block_size: cfg.block_size,
        seed: cfg.seed,
        workload: wl.clone(),
        op_log: op_log(wl),
        state: v.state.clone(),
        state_text: v.state_text.clone(),
        problems: v.problems.clone(),
        log_fingerprint: rec.fingerprint(),
        recording: Some(EmbeddedRecording::new(rec)?),
    };
    let path = dir.join(format!("{}-{}-{}.json", cfg.mode, wl.name, v.state.point));
    std::fs::write(&path, serde_json::to_string_pretty(&f)?)?;
    Ok(path)
}

/// Load a failure file.
pub fn load(path: &Path) -> Result<FailureFile, CrashError> {
    let text = std::fs::read_to_string(path)?;
    let f: FailureFile = serde_json::from_str(&text)?;
    if !(1..=FAILURE_VERSION).contains(&f.version) {
        return Err(CrashError::Replay(format!(
            "failure file version {} (this build reads 1 to {FAILURE_VERSION})",
            f.version
        )));
    }
    Ok(f)
}

/// What a replay found.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The operation log.
    pub op_log: Vec<String>,
    /// The crash state, as described against the new recording.
    pub state_text: String,
    /// Whether the failure file's own recording was replayed (otherwise the workload was
    /// recorded again).
    pub embedded: bool,
    /// Whether the replayed recording's log has the saved shape.
    pub same_log: bool,
    /// Problems found now (empty: the violation did not reproduce).
    pub problems: Vec<String>,
    /// Problems saved in the file.
    pub saved_problems: Vec<String>,
    /// The device events of the recording up to the crash point, one line each, with the
    /// start and return of each operation between them (`--trace`).
    pub trace: Vec<String>,
}

impl ReplayReport {
    /// Whether the violation reproduced.
    pub fn reproduced(&self) -> bool {
        !self.problems.is_empty()
    }

    /// Human-readable report.
    pub fn text(&self) -> String {
        let mut s = String::from("operation log:\n");
        for l in &self.op_log {
            s.push_str(&format!("  {l}\n"));
        }
        s.push_str(&format!("crash state: {}\n", self.state_text));
        if self.embedded {
            s.push_str("replayed the recording saved with the failure (the exact crash state)\n");
        }
        if !self.same_log {
            s.push_str("note: the recorded log differs from the saved one (the code changed since, or the workload is concurrent)\n");
        }
        if self.problems.is_empty() {
            s.push_str("the violation did not reproduce; saved problems were:\n");
            for p in &self.saved_problems {
                s.push_str(&format!("  {p}\n"));
            }
        } else {
            s.push_str("differing fields / problems:\n");
            for p in &self.problems {
                s.push_str(&format!("  {p}\n"));
            }
        }
        s
    }
}

/// Replay a failure file (with `threads` checking threads): its embedded recording if it
/// has one, else a new recording of its workload.
pub fn replay(f: &FailureFile, threads: usize) -> Result<ReplayReport, CrashError> {
    let mut cfg = CrashConfig::new(&f.mode);
    cfg.data = f.data.parse().map_err(CrashError::Replay)?;
    cfg.bugs = f.bugs;
    cfg.check.barrier = f.barrier;
    cfg.block_size = f.block_size;
    cfg.seed = f.seed;
    cfg.threads = threads.max(1);
    let (rec, parsed) = match &f.recording {
        Some(e) => {
            let rec = e.recording(&cfg, &f.workload)?;
            let parsed = ParsedLog::parse(&rec.log);
            (rec, parsed)
        }
        None => super::prepare(&cfg, &f.workload, &BaseCache::default())?,
    };
    let mut result = WorkloadResult::default();
    let per = super::check_states(&cfg, &rec, &parsed, std::slice::from_ref(&f.state), &mut result)?;
    Ok(ReplayReport {
        op_log: op_log(&f.workload),
        state_text: f.state.describe(&parsed),
        embedded: f.recording.is_some(),
        same_log: rec.fingerprint() == f.log_fingerprint,
        problems: per.into_iter().flatten().collect(),
        saved_problems: f.problems.clone(),
        trace: trace(&rec, f.state.point),
    })
}

/// One line per device event before log position `upto`, with operation starts and returns.
fn trace(rec: &Recording, upto: usize) -> Vec<String> {
    use RecordedOp as R;
    let mut out = Vec::new();
    for (x, ev) in rec.log.iter().enumerate().take(upto) {
        for (i, m) in rec.marks.iter().enumerate() {
            if m.start == x {
                out.push(format!("      -- starts: {} (state {})", rec.ops[i].describe(), i + 1));
            }
            if m.end == x {
                out.push(format!("      -- returned: {} (state {})", rec.ops[i].describe(), i + 1));
            }
        }
        out.push(match ev {
            R::Write { seq, block, bufs, tag, fua } => {
                let tx = tag.tx.map_or(String::new(), |t| format!(" tx {}:{}", t.log, t.tid));
                let fua = if *fua { " fua" } else { "" };
                format!("{x:5} #{seq} write {block}+{} {:?}{tx}{fua}", bufs.len(), tag.kind)
            }
            R::WriteDone { seq, write_seq, ok } => {
                format!("{x:5} #{seq} done #{write_seq}{}", if *ok { "" } else { " FAILED" })
            }
            R::FlushStart { seq } => format!("{x:5} #{seq} flush start"),
            R::Flush { seq, start, ok } => format!(
                "{x:5} #{seq} flush{}{}",
                start.map_or(String::new(), |s| format!(" (of #{s})")),
                if *ok { "" } else { " FAILED" }
            ),
            R::Barrier { seq } => format!("{x:5} #{seq} barrier"),
        });
    }
    out
}
