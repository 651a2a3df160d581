//! Checkpointing: write committed blocks to their home locations, flush, then move the log
//! tail forward and record it in the journal superblock.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cjfs_blockdev::{BlockBuf, BlockKind, WriteTag};

use crate::error::JResult;
use crate::flush::flush;
use crate::log_core::LogCore;

/// Body of the background checkpoint thread: checkpoints when the log passes its high-water
/// mark, and when the journal has been idle for a commit interval with work pending.
pub(crate) fn checkpoint_thread(j: Arc<LogCore>) {
    loop {
        {
            let mut st = j.state.lock();
            if st.shutdown || st.aborted.is_some() {
                return;
            }
            if !st.checkpoint_wanted {
                st.wait_for(&j.checkpoint_cv, j.set.config.commit_interval.max(Duration::from_millis(50)));
            }
            st.checkpoint_wanted = false;
            if st.shutdown || st.aborted.is_some() {
                return;
            }
        }
        let pending = !j.checkpoint_list.lock().is_empty();
        if pending && let Err(e) = checkpoint(&j) {
            j.abort(format!("checkpoint failed: {e}"));
            return;
        }
    }
}

/// Checkpoint every durable transaction at the head of the log.
pub(crate) fn checkpoint(j: &LogCore) -> JResult<()> {
    let _g = j.checkpoint_lock.lock();
    let Some(upto) = j.log.lock().ring.durable_prefix() else {
        return Ok(());
    };
    let list = std::mem::take(&mut *j.checkpoint_list.lock());
    let mut seen = HashSet::with_capacity(list.len());
    let mut writes: Vec<(u64, BlockBuf)> = Vec::new();
    let mut done = Vec::new();
    let mut keep = Vec::new();
    for b in list {
        if !seen.insert(b.blocknr()) {
            continue;
        }
        let js = b.jstate();
        match &js.checkpoint {
            Some((t, v)) if t.log == j.id && t.tid <= upto => {
                writes.push((b.blocknr(), v.clone()));
                let t = *t;
                drop(js);
                done.push((b, t));
            }
            Some((t, _)) if t.log == j.id => {
                drop(js);
                keep.push(b);
            }
            // Empty, or another log's copy now (that log's list holds the buffer).
            _ => {}
        }
    }
    if !keep.is_empty() {
        j.checkpoint_list.lock().extend(keep);
    }
    let n = writes.len() as u64;
    let tickets = crate::commit::submit_runs(&j.set, writes, WriteTag::kind(BlockKind::Metadata))?;
    cjfs_blockdev::wait_all(tickets)?;
    flush(j)?;
    for (b, t) in done {
        let mut js = b.jstate();
        if js.checkpoint.as_ref().is_some_and(|(ct, _)| *ct == t)
            && let Some((_, page)) = js.checkpoint.take()
        {
            drop(js);
            j.set.shadow.put(page);
        }
    }
    // The new tail must be durable in the superblock before its blocks can be reused,
    // or a crash could leave the superblock pointing at overwritten log blocks.
    {
        let _sg = j.sb_write.lock();
        let (img, start) = j.log.lock().sb_image_after(upto);
        j.set.dev.write_block(
            j.area.map(0)?,
            BlockBuf::from(img),
            WriteTag::kind(BlockKind::JournalSuper),
        )?;
        flush(j)?;
        let mut l = j.log.lock();
        l.ring.release_upto(upto);
        l.sb_start_on_disk = start;
    }
    j.set.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
    j.set.stats.checkpoint_blocks.fetch_add(n, Ordering::Relaxed);
    Ok(())
}
