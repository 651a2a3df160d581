//! `cjfs recover`: replay the journal of an image, free the orphans it records (the classic
//! list and the orphan file, as a read-write mount does) and report what was done.

use std::sync::Arc;

use cjfs_blockdev::{Device, OverlayDevice};
use cjfs_fs::mkfs::read_layout;
use cjfs_fs::mmp::MmpHandle;
use cjfs_fs::ondisk::superblock::STATE_ERROR;
use cjfs_fs::{Fs, FsError, IjReplayReport, PendingOrphans, pending_orphans, recover_device_held};
use cjfs_journal::JournalError;
use cjfs_journal::recovery::RecoveryReport;

use crate::error::{CliError, CliResult};
use crate::image::{Ctx, open_device, probe};
use crate::out::outln;

/// What a recovery did: the journal replay and the orphans the mount after it released.
struct Outcome {
    replay: RecoveryReport,
    /// What the replay of i-transactions did, when the journal said there might be some.
    ijournal: Option<IjReplayReport>,
    /// The superblock marks errors (kept through the replay): no mount was made after it.
    errors: bool,
    orphans: u32,
    /// The orphans recorded on disk after the replay, before the mount freed them.
    pending: PendingOrphans,
}

/// Replay the journal on `dev` and, if anything was replayed or orphans are recorded (on
/// the classic list, in the orphan file, or the `orphan_present` flag alone), mount
/// read-write once so the orphans are released and the flag cleared.
fn recover_on(image: &str, ctx: &Ctx, dev: Device, mmp: Option<&MmpHandle>) -> CliResult<Outcome> {
    let (replay, ijournal) = recover_device_held(&dev, None, mmp).map_err(|e| match e {
        FsError::Journal(JournalError::Damaged(why)) => CliError::Msg(format!(
            "{image}: the journal is damaged ({why}); nothing was replayed: `e2fsck -fy {image}` \
             replays the intact transactions and repairs the file system"
        )),
        e => CliError::fs(image, e),
    })?;
    // Read after the replay: the log may carry the orphan records (superblock, orphan file
    // blocks), and the orphan file is not in the superblock's `s_last_orphan`.
    let pending = pending_orphans(&dev).map_err(|e| CliError::fs(image, e))?;
    let (sb, _) = read_layout(&*dev).map_err(|e| CliError::fs(image, e))?;
    // A mount refuses to write on top of recorded errors: e2fsck's turn, which the replay
    // has just made possible (the log is plain and empty now).
    let errors = sb.state & STATE_ERROR != 0;
    let mut orphans = 0;
    if !errors {
        // Also when nothing was replayed: a crash of a mount that wrote metadata in place
        // (`nojournal`) leaves the superblock's free counts behind the groups', and the
        // unmount stores them from the groups, as the kernel's mount does.
        let opts = cjfs_fs::MountOptions { mmp_held: mmp.cloned(), ..ctx.options.clone() };
        let (fs, report) = Fs::open_with_report(dev, opts).map_err(|e| CliError::fs(image, e))?;
        fs.unmount().map_err(|e| CliError::fs(image, e))?;
        orphans = report.orphans_cleaned;
    }
    Ok(Outcome { replay, ijournal, errors, orphans, pending })
}

/// Run `cjfs recover`.
///
/// Like every writing command, it validates the image read-only, takes the writer lock,
/// and runs first on an overlay that keeps its writes to itself: a replay that would leave
/// a file system the mount after it refuses (a damaged journal, logged metadata that
/// decodes as corrupt, a bad orphan list) is refused with the image byte-identical.
/// An image whose journal is clean but which still records orphans (a replay that only
/// cleared the needs_recovery flag, or an older cjfs recover) has them freed too.
pub fn run(image: &str, ctx: &Ctx) -> CliResult<()> {
    use cjfs_fs::ondisk::features::Access;
    // A file system cjfs only reads has nothing replayed by it: said before the refusal.
    let p = probe(image, Access::ReadOnly)?;
    if !p.read_only_features.is_empty() {
        let features = p.read_only_features.join(", ");
        if p.needs_recovery {
            return Err(CliError::NeedsForeignRecovery { image: image.to_string(), features });
        }
        let pending = pending_orphans(&open_device(image, true)?).map_err(|e| CliError::fs(image, e))?;
        if pending.any() {
            return Err(CliError::fs(image, FsError::ReadOnlyFeatures(features)));
        }
        outln!("{image}: the journal is clean; nothing to replay");
        return Ok(());
    }
    let p = probe(image, Access::ReadWrite)?;
    let clean = if p.journal {
        "the journal is clean; nothing to replay"
    } else {
        "no journal (has_journal is off); nothing to replay"
    };
    if !p.needs_recovery {
        let pending = pending_orphans(&open_device(image, true)?).map_err(|e| CliError::fs(image, e))?;
        if !pending.any() {
            outln!("{image}: {clean}");
            return Ok(());
        }
    }
    let dev = open_device(image, false)?;
    let mut mmp = crate::image::hold_mmp(ctx, image, &dev)?;
    let overlay = OverlayDevice::new(dev.clone()).map_err(|e| CliError::fs(image, FsError::Device(e)))?;
    let handle = mmp.as_ref().map(cjfs_fs::mmp::Mmp::handle);
    recover_on(image, ctx, Arc::new(overlay), handle.as_ref())?;
    if let Some(m) = mmp.as_mut() {
        m.establish();
    }
    let Outcome { replay: r, ijournal, errors, orphans, pending } =
        recover_on(image, ctx, dev, handle.as_ref())?;
    if let Some(m) = mmp {
        m.release().map_err(|e| CliError::fs(image, e))?;
    }
    if !p.needs_recovery {
        outln!("{image}: {clean}");
    } else if r.needed {
        // A tid range names one log's transactions; several logs' tids are unrelated.
        let which = if r.logs_replayed > 1 {
            format!("from {} logs", r.logs_replayed)
        } else {
            // The last replayed, as `info` names it: `end_tid` is one past the scan's end
            // (JBD2 skips the id a torn commit may have used).
            format!("tids {}..{}", r.start_tid, r.start_tid.wrapping_add(r.transactions.max(1) - 1))
        };
        outln!(
            "{image}: replayed {} transaction(s) ({which}), {} logged block(s): {} block(s) written \
             home, {} skipped as revoked ({} revoke record(s))",
            r.transactions,
            r.blocks_replayed,
            r.blocks_written,
            r.blocks_revoked,
            r.revoke_records
        );
        outln!("{image}: next transaction id {}", r.end_tid);
        if let Some(t) = r.failed_commit.filter(|_| !r.failed_commit_followed) {
            outln!(
                "{image}: transaction {t}'s commit block, the last write of the log, was torn by the \
                 crash; that transaction was never acknowledged and was not replayed"
            );
        }
    } else {
        outln!("{image}: the journal log was empty; cleared the needs_recovery flag");
    }
    if let Some(ij) = ijournal.filter(|ij| ij.scanned + ij.incomplete > 0) {
        outln!(
            "{image}: i-transactions: {} complete record(s) in {} area(s), {} applied ({} block(s)), \
             {} older than the log's last commit, {} superseded, {} incomplete (never acknowledged)",
            ij.scanned,
            ij.areas,
            ij.applied,
            ij.blocks,
            ij.stale,
            ij.superseded,
            ij.incomplete
        );
        for why in &ij.skipped {
            outln!("{image}: i-transaction not applied: {why}");
        }
    }
    if orphans > 0 {
        outln!("{image}: released {orphans} orphan inode(s)");
    }
    if errors {
        return Err(CliError::Msg(format!(
            "{image}: the superblock marks the file system as having errors (s_state, set before \
             this recovery and kept through it, as the kernel keeps it); orphans were not released: \
             run `e2fsck -f {image}`, which can read the journal now"
        )));
    }
    if pending.present_flag {
        // Cleared by the unmount once the orphan file is empty, as the kernel does.
        outln!("{image}: cleared the orphan_present flag");
    }
    Ok(())
}
