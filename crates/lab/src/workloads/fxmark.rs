//! FxMark's write microbenchmarks, as the Z-Journal paper ran them.
//!
//! Sharing level *low* (L): every thread works on a private file or in a private
//! directory; *medium* (M): threads share one file or one directory. One operation each:
//!
//! | name | operation |
//! |---|---|
//! | DWOL / DWOM | overwrite a 4 KiB block of a private file / of a shared file (own block) |
//! | DWAL | append a 4 KiB block to a private file |
//! | DWSL | overwrite a 4 KiB block of a private file and fsync it |
//! | MWCL / MWCM | create an empty file in a private / the shared directory |
//! | MWUL / MWUM | unlink an empty file in a private / the shared directory |
//! | MWRL / MWRM | rename a file within a private / the shared directory |
//!
//! DWAL truncates its file back to zero at 64 MiB, and MWUL/MWUM re-create their pool of
//! files when it runs out; that housekeeping is left out of the rate.

use std::io;

use super::{Params, RunResult, data_pool, run_workers};
use crate::target::Target;

/// One FxMark write workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fx {
    /// Overwrite, private file.
    Dwol,
    /// Append, private file.
    Dwal,
    /// Overwrite + fsync, private file.
    Dwsl,
    /// Overwrite, shared file.
    Dwom,
    /// Create, private directory.
    Mwcl,
    /// Create, shared directory.
    Mwcm,
    /// Unlink, private directory.
    Mwul,
    /// Unlink, shared directory.
    Mwum,
    /// Rename, private directory.
    Mwrl,
    /// Rename, shared directory.
    Mwrm,
}

/// Files per thread in the unlink pool (before scaling).
pub const UNLINK_POOL: usize = 10_000;
/// DWAL's file is truncated at this size.
pub const APPEND_CAP: u64 = 64 << 20;

impl Fx {
    /// All ten, in the papers' order.
    pub const ALL: [Fx; 10] =
        [Fx::Dwol, Fx::Dwal, Fx::Dwsl, Fx::Dwom, Fx::Mwcl, Fx::Mwcm, Fx::Mwul, Fx::Mwum, Fx::Mwrl, Fx::Mwrm];

    /// FxMark's name.
    pub fn name(&self) -> &'static str {
        match self {
            Fx::Dwol => "DWOL",
            Fx::Dwal => "DWAL",
            Fx::Dwsl => "DWSL",
            Fx::Dwom => "DWOM",
            Fx::Mwcl => "MWCL",
            Fx::Mwcm => "MWCM",
            Fx::Mwul => "MWUL",
            Fx::Mwum => "MWUM",
            Fx::Mwrl => "MWRL",
            Fx::Mwrm => "MWRM",
        }
    }

    fn shared(&self) -> bool {
        matches!(self, Fx::Dwom | Fx::Mwcm | Fx::Mwum | Fx::Mwrm)
    }
}

/// Directory a thread works in, and the prefix of its file names there.
fn place(x: Fx, id: usize) -> (String, String) {
    if x.shared() { ("fx/shared".into(), format!("t{id}-")) } else { (format!("fx/t{id}"), String::new()) }
}

fn make_pool(t: &dyn Target, dir: &str, prefix: &str, n: usize) -> io::Result<()> {
    for i in 0..n {
        let fh = t.create(&format!("{dir}/{prefix}u{i}"))?;
        t.close(fh)?;
    }
    Ok(())
}

/// Set up and run one FxMark workload.
pub fn run(t: &dyn Target, p: &Params, x: Fx) -> io::Result<RunResult> {
    let block = &data_pool()[..4096];
    let pool = p.scaled(UNLINK_POOL, 16);
    t.mkdir("fx")?;
    t.mkdir("fx/shared")?;
    for id in 0..p.threads {
        t.mkdir(&format!("fx/t{id}"))?;
    }
    for id in 0..p.threads {
        let (dir, pre) = place(x, id);
        match x {
            // The private files of DWOL, DWSL and DWAL are made by their workers (below).
            Fx::Dwom if id == 0 => {
                let fh = t.create("fx/shared/file")?;
                for b in 0..p.threads as u64 {
                    t.write_at(fh, b * 4096, block)?;
                }
                t.close(fh)?;
            }
            Fx::Mwul | Fx::Mwum => make_pool(t, &dir, &pre, pool)?,
            Fx::Mwrl | Fx::Mwrm => {
                let fh = t.create(&format!("{dir}/{pre}r0"))?;
                t.close(fh)?;
            }
            _ => {}
        }
    }
    t.sync_all()?;
    run_workers(t, x.name(), p.threads, p.duration, p.seed, |w| {
        let (dir, pre) = place(x, w.id);
        let mut n: u64 = 0;
        match x {
            Fx::Dwol | Fx::Dwsl | Fx::Dwom | Fx::Dwal => {
                let (path, off) = if x == Fx::Dwom {
                    ("fx/shared/file".to_string(), w.id as u64 * 4096)
                } else {
                    (format!("{dir}/file"), 0)
                };
                let fh = if x == Fx::Dwom {
                    t.open(&path)?
                } else {
                    // As FxMark's per-worker setup: the worker makes its private file itself,
                    // so an allocator that follows the caller's core or log places it there.
                    w.untimed(|| {
                        let fh = t.create(&path)?;
                        if x != Fx::Dwal {
                            t.write_at(fh, 0, block)?;
                        }
                        t.fsync(fh, false)?;
                        Ok(fh)
                    })?
                };
                let mut end = 0u64;
                while w.running() {
                    match x {
                        Fx::Dwal => {
                            if end >= APPEND_CAP {
                                w.untimed(|| t.truncate(fh, 0))?;
                                end = 0;
                            }
                            w.op(|| t.write_at(fh, end, block))?;
                            end += 4096;
                        }
                        Fx::Dwsl => {
                            w.fsync_op(|| {
                                t.write_at(fh, off, block)?;
                                t.fsync(fh, false)
                            })?;
                        }
                        _ => w.op(|| t.write_at(fh, off, block))?,
                    }
                    w.bytes += 4096;
                }
                t.close(fh)?;
            }
            Fx::Mwcl | Fx::Mwcm => {
                while w.running() {
                    let path = format!("{dir}/{pre}c{n}");
                    w.op(|| {
                        let fh = t.create(&path)?;
                        t.close(fh)
                    })?;
                    n += 1;
                }
            }
            Fx::Mwul | Fx::Mwum => {
                let mut i = 0usize;
                while w.running() {
                    if i == pool {
                        w.untimed(|| make_pool(t, &dir, &pre, pool))?;
                        i = 0;
                    }
                    let path = format!("{dir}/{pre}u{i}");
                    w.op(|| t.unlink(&path))?;
                    i += 1;
                }
            }
            Fx::Mwrl | Fx::Mwrm => {
                while w.running() {
                    let (a, b) = (format!("{dir}/{pre}r{}", n % 2), format!("{dir}/{pre}r{}", (n + 1) % 2));
                    w.op(|| t.rename(&a, &b))?;
                    n += 1;
                }
            }
        }
        Ok(())
    })
}
