//! A transaction built outside the journal, committed to a clean log and replayed: how the
//! file system's own recovery steps (iJournaling's i-transactions, ext4 fast-commit areas)
//! reach their home blocks all or nothing.
//!
//! Those steps compute every block they change from the image as it stands (the normal
//! journal already replayed) and hand the result here. Writing the blocks home one by one
//! would leave a cut recovery half applied, and the next attempt would compute its changes
//! from that half-changed image (a freed block already free, an inode already installed):
//! not the same result. As one JBD2 transaction they are either replayed whole, by this run
//! or by the next recovery's normal replay, or not at all, in which case the next attempt
//! starts from the same image and computes the same blocks. The commit time is the caller's
//! (a value read from the image), so a repeated attempt writes the same log blocks too.

use cjfs_blockdev::{BlockBuf, BlockDevice, BlockKind, WriteRequest, WriteTag};

use crate::area::JournalArea;
use crate::checksum::csum_seed;
use crate::commit_block::CommitBlock;
use crate::error::{JResult, JournalError};
use crate::recovery::{RecoveryReport, recover_strict, tid_gt};
use crate::ring::LogRing;
use crate::superblock::{read_superblock, write_superblock};

/// Commit `blocks` (`(home block, image)`, distinct blocks) as one transaction to the clean
/// log in `area`, then replay it (see the module docs). Its id is the log's `s_sequence`, or
/// `min_tid` when that is later (so every record the caller judged against ids up to `min_tid`
/// is older than a committed transaction afterwards); `commit_sec` goes into the commit
/// block. Nothing is written when `blocks` is empty. Fails before writing anything when the
/// log needs recovery itself or the transaction does not fit it.
pub fn commit_and_replay(
    dev: &dyn BlockDevice,
    area: &JournalArea,
    min_tid: u32,
    commit_sec: u64,
    blocks: &[(u64, BlockBuf)],
) -> JResult<Option<RecoveryReport>> {
    if blocks.is_empty() {
        return Ok(None);
    }
    let mut sb = read_superblock(dev, area)?;
    if sb.needs_recovery() {
        return Err(JournalError::Corrupt(
            "journal: a recovery transaction needs a clean log, and this one holds transactions".into(),
        ));
    }
    let f = sb.features();
    if f.compat_checksum() {
        return Err(JournalError::Incompatible(
            "journal: recovery transactions are not written to a journal with v1 (compat) checksums".into(),
        ));
    }
    let tid = if tid_gt(min_tid, sb.s_sequence) { min_tid } else { sb.s_sequence };
    let bs = dev.block_size();
    let mut sorted = blocks.to_vec();
    sorted.sort_unstable_by_key(|(b, _)| *b);
    let log = crate::writer::build_log_blocks_for(u64::from(tid), f, sb.s_uuid, &sorted, &[], bs)?;
    let ring = LogRing::new(u64::from(sb.s_first), sb.log_end());
    if log.len() as u64 + 1 >= ring.capacity() {
        return Err(JournalError::Incompatible(format!(
            "journal: the recovery transaction of {} blocks does not fit the log of {} blocks",
            log.len() + 1,
            ring.capacity()
        )));
    }
    let cb = CommitBlock::new(tid, commit_sec, 0);
    let commit = BlockBuf::from(cb.encode_with(&f, csum_seed(&sb.s_uuid), None, bs)?);
    let mut lblk = ring.first();
    let mut reqs = Vec::with_capacity(log.len());
    for (kind, img) in log {
        reqs.push(WriteRequest {
            block: area.map(lblk)?,
            bufs: vec![img],
            tag: WriteTag::kind(kind),
            fua: false,
        });
        lblk = ring.next(lblk);
    }
    cjfs_blockdev::wait_all(dev.submit_batch(reqs)?)?;
    dev.flush()?;
    dev.submit(WriteRequest {
        block: area.map(lblk)?,
        bufs: vec![commit],
        tag: WriteTag::kind(BlockKind::JournalCommit),
        fua: false,
    })?
    .wait()?;
    dev.flush()?;
    sb.s_start = sb.s_first;
    sb.s_sequence = tid;
    write_superblock(dev, area, &sb, false)?;
    dev.flush()?;
    Ok(Some(recover_strict(dev, area)?))
}
