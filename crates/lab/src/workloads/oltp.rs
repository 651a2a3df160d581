//! OLTP-insert-like: what the CJFS paper's OLTP-Insert on MySQL does to the file system.
//!
//! The paper's Table 2 gives the mix — 77.8% write, 12.2% read, 10.0% fsync, no create or
//! unlink — and §3.1 the sizes: writes of 8 to 32 KiB, 8 KiB for 81% of them, followed by
//! fsync. Here every thread draws operations from that mix against a set of shared table
//! files (8 tables of 32 MiB, scaled by [`Params::scale`]): a write of 8 KiB (81%) or 16,
//! 24 or 32 KiB at a random 8 KiB-aligned offset, a random 8 KiB read, or an fsync of the
//! table it last wrote. Transaction conflicts are rare, as in the paper.

use std::io;

use rand::Rng;

use super::{Params, RunResult, run_workers, write_pool};
use crate::target::{Fh, Target};

/// Table files.
pub const TABLES: usize = 8;
/// Size of each table file (before scaling).
pub const TABLE_BYTES: u64 = 32 << 20;
const PAGE: u64 = 8192;

/// Build the tables and run the mix.
pub fn run(t: &dyn Target, p: &Params) -> io::Result<RunResult> {
    let size = (p.scaled((TABLE_BYTES / PAGE) as usize, 16) as u64) * PAGE;
    let _ = t.mkdir("oltp");
    for i in 0..TABLES {
        let fh = t.create(&format!("oltp/table{i}.ibd"))?;
        write_pool(t, fh, 0, size)?;
        t.close(fh)?;
    }
    t.sync_all()?;
    run_workers(t, "oltp-insert", p.threads, p.duration, p.seed, |w| {
        let fhs: Vec<Fh> =
            (0..TABLES).map(|i| t.open(&format!("oltp/table{i}.ibd"))).collect::<io::Result<_>>()?;
        let mut buf = vec![0u8; PAGE as usize];
        let mut last = None;
        let r = (|| -> io::Result<()> {
            while w.running() {
                let x: f64 = w.rng.r#gen();
                let table = w.rng.gen_range(0..TABLES);
                if x < 0.778 {
                    let len = if w.rng.gen_bool(0.81) { PAGE } else { PAGE * w.rng.gen_range(2..=4) };
                    let off = w.rng.gen_range(0..(size - len) / PAGE + 1) * PAGE;
                    w.op(|| write_pool(t, fhs[table], off, len))?;
                    w.bytes += len;
                    last = Some(table);
                } else if x < 0.9 {
                    let off = w.rng.gen_range(0..size / PAGE) * PAGE;
                    w.op(|| t.read_at(fhs[table], off, &mut buf))?;
                    w.bytes += PAGE;
                } else if let Some(l) = last.take() {
                    w.fsync_op(|| t.fsync(fhs[l], false))?;
                }
            }
            Ok(())
        })();
        for fh in fhs {
            t.close(fh)?;
        }
        r
    })
}
