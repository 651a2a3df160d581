//! Leaving data journaling without emptying the journal (journaling of journal, FAST'14
//! §2.2: the per-file mode is only cheap if switching it is).
//!
//! A file whose data was journaled may leave copies of its blocks in the log, and committed
//! images of them waiting for the checkpoint. Once the file writes those blocks in place
//! (ordered mode), two things could put stale data over the new: recovery replaying a logged
//! copy, and the checkpoint writing an older image after the in-place write. ext4 (and the
//! `empty` way here) prevents both by committing and checkpointing the whole journal at the
//! switch (`jbd2_journal_flush` in `ext4_change_inode_journal_flag`): every file's pending
//! blocks are written home, synchronously, while the switching file waits.
//!
//! The `revoke` way needs nothing written at the switch, and writes nothing the checkpoint
//! would not have. A block's committed image is *handed over* to a transaction `r`
//! ([`Handle::leave_data_journaling`]):
//!
//! 1. the image is taken away from the checkpoint (under `checkpoint_lock`, so no checkpoint
//!    is writing it meanwhile) — the checkpoint can no longer write it late;
//! 2. the block's live contents (the image, or newer) become ordered data of `r`: written home
//!    before `r`'s commit record, as any ordered write;
//! 3. the block is revoked in `r`: once `r` is durable, recovery replays no older copy of it;
//! 4. the log keeps every transaction from the oldest image's on until `r` is durable
//!    (`LogCore::leave_holds`): until then a crash must still find those copies, since the
//!    block's home may hold neither the image nor anything newer.
//!
//! At the switch only the blocks the file logged in the switch's own transaction are handed
//! over (the sync that decides to go back to ordered makes the switch in the transaction
//! holding the file's last window: those blocks leave its log for its ordered writes and are
//! written home once instead of logged first; every older version must be durable by then).
//! A handed-over block is revoked in `r`, so the file's later writes of it go in place (the
//! file's syncs wait for `r`): its `last_version`, which would have it journaled again for
//! an older copy still in the log, is cleared. (Until this was, a database sent back to
//! ordered at its first update transaction logged its whole window again at each of the
//! next transactions until the log filled and a checkpoint wrote them home.)
//! Every other block keeps its image as checkpoint work: if the checkpoint writes it first,
//! nothing more is needed (the logged copy replays the same contents). If the file writes
//! such a block before that, the file system journals the write again (`cjfs_fs`'s
//! `adaptive::before_in_place`): the newer image supersedes the older in the log and in the
//! checkpoint, and the file's next sync commits it, in one single write with the file's
//! other writes (overwrites, which that write need not wait for). Handing the block over
//! there instead (revoking it in the writing transaction) made that sync's commit wait for
//! the new contents to be durable before its revoke could be: a second flush on each of
//! those syncs. A block the file frees is revoked, as a data-journaled file's. So a WAL or
//! database that leaves data journaling pays nothing for the blocks it does not rewrite
//! before their checkpoint — handing all of them over at the switch had that sync write
//! every one of them home.
//!
//! A commit that finds no log space while a hold keeps the tail (the log filled before
//! `r` committed; `r` itself may be the one waiting) breaks it: the held blocks' live
//! contents are written home and flushed, after which the older copies are not needed (a
//! crash may then find the file's unsynced writes home, as ordered mode allows).
//!
//! A crash before `r` is durable replays the old copies (the file as of its last journaled
//! commit, which is what it had made durable); after, the revokes hold and the block's home
//! has its ordered write.
//!
//! With a single log only: with several logs a copy's release also depends on the other logs'
//! (`checkpoint.rs`), and the caller empties the journal instead.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cjfs_blockdev::{BlockKind, WriteTag};

use crate::buffer::{Buffer, Tid};
use crate::config::JournalKind;
use crate::error::JResult;
use crate::handle::Handle;
use crate::log_core::LogCore;

impl Handle {
    /// The file whose data blocks are `bufs` (its cached data buffers) leaves data journaling
    /// in this handle's transaction (see the module docs). Its blocks journaled in this very
    /// transaction leave its log for its ordered writes too (the sync that decided the
    /// switch then writes its window home once instead of logging it); every other version
    /// must be durable. Returns how many blocks had a committed image handed over to this
    /// transaction's ordered writes, or `None` when this journal cannot do it (several logs,
    /// no log, or a buffer in another transaction or in flight): nothing was changed and the
    /// caller commits first or empties the journal. `revoke: false` is a planted bug's
    /// switch (the crash harness' self-test), else `true`.
    pub fn leave_data_journaling(&mut self, bufs: &[Arc<Buffer>], revoke: bool) -> JResult<Option<u64>> {
        let j = self.j.clone();
        if j.set.multi_log() || j.set.config.kind != JournalKind::Jbd2 {
            return Ok(None);
        }
        let id = self.tx_id();
        // Every older transaction durable, so every version of these blocks outside this
        // transaction has its image installed (`mark_durable` does that before it publishes
        // durability): a version still committing would put its image in the checkpoint
        // after the hand-over, unrevoked, to be written over what the file writes in place.
        if id.tid > 1 && !j.is_durable(id.tid - 1) {
            return Ok(None);
        }
        let _ckpt = j.checkpoint_lock.lock();
        // Nothing else changes these buffers' journal state while the checkpoint lock and
        // the caller's inode lock are held (this transaction cannot lock up: the handle is
        // open).
        if bufs.iter().any(|b| {
            let js = b.jstate();
            js.running.is_some_and(|t| t != id) || js.versions > 0
        }) {
            return Ok(None);
        }
        let mut oldest: Option<Tid> = None;
        let mut handed = Vec::new();
        let mut moved = Vec::new();
        for b in bufs {
            let (image, logged_here) = {
                let mut js = b.jstate();
                let (image, here) = (js.checkpoint.take(), js.running == Some(id));
                if image.is_some() || here {
                    // Revoked here below: no older copy of it replays once this transaction
                    // is durable, and the file's syncs wait for that (`leave_tx`), so its
                    // next write may go in place, not be journaled again for a version in the
                    // log (`cjfs_fs`'s `adaptive::before_in_place` reads this).
                    js.last_version = None;
                }
                (image, here)
            };
            if let Some(c) = image {
                oldest = Some(oldest.map_or(c.tx.tid, |o| o.min(c.tx.tid)));
                j.set.shadow.put(c.image);
                handed.push(b.clone());
            } else if !logged_here {
                continue;
            }
            moved.push(b.clone());
        }
        let n = handed.len() as u64;
        // The hold goes in before anything can fail: the images are gone from the checkpoint.
        if let Some(o) = oldest {
            let seq = j.leave_seq.fetch_add(1, Ordering::Relaxed);
            j.leave_holds.lock().push(LeaveHold { seq, oldest: o, r: id.tid, bufs: handed });
        }
        j.set.stats.leave_handed.fetch_add(n, Ordering::Relaxed);
        for b in &moved {
            // Also takes a block logged here off this transaction's list.
            self.revoke(b.blocknr())?;
            if !revoke {
                self.tx()?.lists.lock().revokes.remove(&b.blocknr());
            }
            self.dirty_data(b)?;
        }
        Ok(Some(n))
    }
}

/// The newest transaction of `j` the checkpoint may release, given that `durable` is the
/// durable prefix: below the oldest copy a not yet durable switch still needs (`None`: no
/// such hold). Holds whose switch is durable are dropped.
pub(crate) fn leave_cap(j: &LogCore, durable: Tid) -> Option<Tid> {
    let mut holds = j.leave_holds.lock();
    holds.retain(|h| h.r > durable);
    holds.iter().map(|h| h.oldest.saturating_sub(1)).min()
}

/// A file's switch out of data journaling that keeps older transactions in the log until
/// its transaction `r` is durable.
#[derive(Debug)]
pub(crate) struct LeaveHold {
    /// Tells holds apart (several files may switch in one transaction).
    pub seq: u64,
    /// The oldest transaction holding a copy whose image went to `r`'s ordered writes.
    pub oldest: Tid,
    /// The switch's transaction.
    pub r: Tid,
    /// The buffers whose images were handed over.
    pub bufs: Vec<Arc<Buffer>>,
}

/// Break every hold (the log is full; see the module docs): write the held buffers' live
/// images home, flush, then let the checkpoint release what they kept. Returns whether there
/// was any.
///
/// Any live image taken after a switch holds the file's committed contents, so one of them
/// durable is all a hold waits for. They are written whatever their dirty state: a clean
/// buffer's ordered write may still be in flight, not covered by this flush. Their dirty
/// state is left alone (a dirty one is written again by its transaction, harmlessly). A
/// buffer the file journals again since (switched back to data) goes home with its live,
/// not yet committed contents, as an older transaction's ordered write of it would
/// (`adaptive::to_data`): unsynced data, which ordered mode lets reach home early.
pub(crate) fn break_holds(j: &LogCore) -> JResult<bool> {
    let durable = j.log.lock().ring.durable_prefix().unwrap_or(0);
    let (seqs, bufs): (Vec<u64>, Vec<Arc<Buffer>>) = {
        let mut holds = j.leave_holds.lock();
        // A durable switch's hold is over (its blocks may since have been freed and reused:
        // their live images are not this file's to write).
        holds.retain(|h| h.r > durable);
        if holds.is_empty() {
            return Ok(false);
        }
        (holds.iter().map(|h| h.seq).collect(), holds.iter().flat_map(|h| h.bufs.iter().cloned()).collect())
    };
    crate::ordered_sums::settle(&j.set, &bufs, None, true)?;
    let tickets = {
        // Images taken and submitted in one order with every other home write of data.
        let _hw = j.set.home_write_lock.lock();
        let writes: Vec<(u64, cjfs_blockdev::BlockBuf)> =
            bufs.iter().map(|b| (b.blocknr(), b.snapshot())).collect();
        crate::commit::submit_runs(&j.set, writes, WriteTag::kind(BlockKind::Data))?
    };
    cjfs_blockdev::wait_all(tickets)?;
    crate::flush::flush(j)?;
    // Exactly the holds written: another file may have switched meanwhile.
    j.leave_holds.lock().retain(|h| !seqs.contains(&h.seq));
    j.set.stats.leave_breaks.fetch_add(1, Ordering::Relaxed);
    Ok(true)
}

/// Whether some hold's switch is durable, so a checkpoint would release what it kept.
pub(crate) fn holds_to_release(j: &LogCore) -> bool {
    let durable = j.log.lock().ring.durable_prefix().unwrap_or(0);
    j.leave_holds.lock().iter().any(|h| h.r <= durable)
}
