//! Append + fsync on one small file per thread: every thread appends a 4 KiB block to its own
//! file and fsyncs it; at [`CAP`] the file is truncated back to zero, so it stays small and
//! its extents stay in the inode. The iJournaling issue's unit case: each fsync needs the
//! file's new data block and its inode (size, extent) durable and nothing else, so an
//! i-transaction is one header with the inode image plus a commit block (one block in the
//! single form), with no normal commit on the fsync path.

use std::io;

use super::{Params, RunResult, run_workers, write_pool};
use crate::target::Target;

/// Bytes appended before each fsync.
pub const CHUNK: u64 = 4096;
/// The file is truncated to zero when it reaches this size.
pub const CAP: u64 = 1 << 20;

/// Set up (one empty file per thread, made durable) and run.
pub fn run(t: &dyn Target, p: &Params) -> io::Result<RunResult> {
    t.mkdir("append")?;
    for id in 0..p.threads {
        let fh = t.create(&format!("append/f{id}"))?;
        t.close(fh)?;
    }
    t.sync_all()?;
    run_workers(t, "append-fsync", p.threads, p.duration, p.seed, |w| {
        let fh = t.open(&format!("append/f{}", w.id))?;
        let r = (|| -> io::Result<()> {
            let mut off = 0u64;
            while w.running() {
                if off >= CAP {
                    w.op(|| t.truncate(fh, 0))?;
                    off = 0;
                }
                w.op(|| write_pool(t, fh, off, CHUNK))?;
                w.fsync_op(|| t.fsync(fh, false))?;
                w.bytes += CHUNK;
                off += CHUNK;
            }
            Ok(())
        })();
        t.close(fh)?;
        r
    })
}
