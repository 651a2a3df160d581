//! SQLite-like transactions: the file patterns of the "journaling of journal" paper
//! (FAST'14), without SQLite.
//!
//! The paper's test runs in rounds on one table of records with an integer key and a
//! 100-character value: insert 10,000 records, update them in random order, delete them in
//! random order, as 1-operation or 1000-operation transactions; it reports the mean
//! transaction response time. Each thread here runs those rounds on its own database
//! (records of 110 bytes, 37 to a 4 KiB page; a record's page is `2 + key / 37`) and
//! reproduces what SQLite does to the files at commit:
//!
//! * **rollback** (`journal_mode=DELETE`, `synchronous=FULL`): create `db-journal`, write
//!   its header and the original image of every page the transaction touches (plus page 1,
//!   whose change counter every write transaction bumps), fdatasync the journal, rewrite
//!   the header with the record count, fdatasync it again, fsync the directory (the new
//!   journal's entry), write the pages to the database, fdatasync the database, delete the
//!   journal — four syncs per transaction;
//! * **WAL**: append a frame (24-byte header + page) per touched page to `db-wal`,
//!   fdatasync it once; every 1000 frames checkpoint: write the pages to the database,
//!   fdatasync it, and restart the log from its header.
//!
//! A transaction is one operation in the results (op latency = response time).

use std::collections::BTreeSet;
use std::io;
use std::time::Instant;

use rand::seq::SliceRandom;

use super::{Params, RunResult, Worker, data_pool, run_workers};
use crate::target::{Fh, Target};

/// The SQLite journal mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Journal {
    /// Rollback journal, deleted at commit.
    Rollback,
    /// Write-ahead log.
    Wal,
}

impl Journal {
    /// Short name used in workload names.
    pub fn name(&self) -> &'static str {
        match self {
            Journal::Rollback => "rollback",
            Journal::Wal => "wal",
        }
    }
}

/// Records per round (before scaling).
pub const RECORDS: usize = 10_000;
const PER_PAGE: usize = 4096 / 110;
const PAGE: u64 = 4096;
const JHDR: u64 = 512;
const JREC: u64 = 4 + PAGE + 4;
const WALHDR: u64 = 32;
const FRAME: u64 = 24 + PAGE;
const CHECKPOINT_FRAMES: u64 = 1000;

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Insert,
    Update,
    Delete,
}

struct Db<'a> {
    t: &'a dyn Target,
    dir: String,
    db: Fh,
    wal: Option<Fh>,
    frames: u64,
    unckpt: BTreeSet<u64>,
}

fn page(key: usize) -> u64 {
    2 + (key / PER_PAGE) as u64
}

impl Db<'_> {
    fn commit(&mut self, w: &mut Worker, mode: Journal, pages: &BTreeSet<u64>) -> io::Result<u64> {
        let t = self.t;
        let mut bytes = 0;
        match mode {
            Journal::Rollback => {
                let jpath = format!("{}/db-journal", self.dir);
                let j = t.create(&jpath)?;
                t.write_at(j, 0, &data_pool()[..JHDR as usize])?;
                let all: Vec<u64> = std::iter::once(1).chain(pages.iter().copied()).collect();
                for (k, _) in all.iter().enumerate() {
                    t.write_at(j, JHDR + k as u64 * JREC, &data_pool()[..JREC as usize])?;
                }
                w.inner_fsync(|| t.fsync(j, true))?;
                t.write_at(j, 0, &data_pool()[64..64 + 28])?;
                w.inner_fsync(|| t.fsync(j, true))?;
                w.inner_fsync(|| t.fsync_dir(&self.dir))?;
                for p in &all {
                    t.write_at(self.db, (p - 1) * PAGE, &data_pool()[..PAGE as usize])?;
                }
                w.inner_fsync(|| t.fsync(self.db, true))?;
                t.close(j)?;
                t.unlink(&jpath)?;
                bytes += JHDR + all.len() as u64 * (JREC + PAGE) + 28;
            }
            Journal::Wal => {
                let wal = self.wal.ok_or_else(|| io::Error::other("WAL not open"))?;
                for p in pages {
                    t.write_at(wal, WALHDR + self.frames * FRAME, &data_pool()[..FRAME as usize])?;
                    self.frames += 1;
                    self.unckpt.insert(*p);
                }
                w.inner_fsync(|| t.fsync(wal, true))?;
                bytes += pages.len() as u64 * FRAME;
                if self.frames >= CHECKPOINT_FRAMES {
                    for p in &self.unckpt {
                        t.write_at(self.db, (p - 1) * PAGE, &data_pool()[..PAGE as usize])?;
                    }
                    w.inner_fsync(|| t.fsync(self.db, true))?;
                    t.write_at(wal, 0, &data_pool()[..WALHDR as usize])?;
                    bytes += self.unckpt.len() as u64 * PAGE;
                    self.unckpt.clear();
                    self.frames = 0;
                }
            }
        }
        Ok(bytes)
    }
}

/// Set up and run `ops_per_txn`-operation transactions in `mode`.
pub fn run(t: &dyn Target, p: &Params, mode: Journal, ops_per_txn: u32) -> io::Result<RunResult> {
    let records = p.scaled(RECORDS, 100);
    t.mkdir("sqlite")?;
    for id in 0..p.threads {
        let dir = format!("sqlite/t{id}");
        t.mkdir(&dir)?;
        let db = t.create(&format!("{dir}/db"))?;
        t.write_at(db, 0, &data_pool()[..PAGE as usize])?;
        t.close(db)?;
        if mode == Journal::Wal {
            let wal = t.create(&format!("{dir}/db-wal"))?;
            t.write_at(wal, 0, &data_pool()[..WALHDR as usize])?;
            t.close(wal)?;
        }
    }
    t.sync_all()?;
    let name = format!("sqlite-{}-{ops_per_txn}", mode.name());
    run_workers(t, &name, p.threads, p.duration, p.seed, |w| {
        let dir = format!("sqlite/t{}", w.id);
        let mut db = Db {
            t,
            db: t.open(&format!("{dir}/db"))?,
            wal: if mode == Journal::Wal { Some(t.open(&format!("{dir}/db-wal"))?) } else { None },
            dir,
            frames: 0,
            unckpt: BTreeSet::new(),
        };
        let mut order: Vec<usize> = (0..records).collect();
        let (mut phase, mut cursor) = (Phase::Insert, 0usize);
        let r = (|| -> io::Result<()> {
            while w.running() {
                let mut pages = BTreeSet::new();
                for _ in 0..ops_per_txn {
                    if cursor == records {
                        cursor = 0;
                        phase = match phase {
                            Phase::Insert => Phase::Update,
                            Phase::Update => Phase::Delete,
                            Phase::Delete => Phase::Insert,
                        };
                        order.shuffle(&mut w.rng);
                    }
                    let key = if phase == Phase::Insert { cursor } else { order[cursor] };
                    pages.insert(page(key));
                    cursor += 1;
                }
                let s = Instant::now();
                let b = db.commit(w, mode, &pages)?;
                w.lat.record(s.elapsed());
                w.ops += 1;
                w.bytes += b;
            }
            Ok(())
        })();
        t.close(db.db)?;
        if let Some(wal) = db.wal {
            t.close(wal)?;
        }
        r
    })
}
