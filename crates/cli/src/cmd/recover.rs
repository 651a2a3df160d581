//! `cjfs recover`: replay the journal of an image and report what was replayed.

use cjfs_fs::{Fs, MountOptions, recover_device};

use crate::error::{CliError, CliResult};
use crate::image::{Ctx, open_device, probe};
use crate::out::outln;

/// Run `cjfs recover`.
pub fn run(image: &str, ctx: &Ctx) -> CliResult<()> {
    // Validate everything through a read-only device first: a refused image is not touched.
    let p = probe(image)?;
    if !p.needs_recovery {
        outln!("{image}: the journal is clean; nothing to replay");
        return Ok(());
    }
    let dev = open_device(image, false)?;
    let r = recover_device(&dev).map_err(|e| CliError::fs(image, e))?;
    if r.needed {
        outln!(
            "{image}: replayed {} transaction(s) (tids {}..{}), {} logged block(s): {} block(s) written \
             home, {} skipped as revoked ({} revoke record(s))",
            r.transactions,
            r.start_tid,
            r.end_tid.wrapping_sub(1),
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
    drop(dev);
    // Orphans left by the interrupted mount: a read-write mount releases them (not after
    // damage: the file system is marked as having errors and e2fsck -f must repair it).
    if !r.damaged() && (p.sb.last_orphan != 0 || r.needed) {
        let dev = open_device(image, false)?;
        let opts = MountOptions { journal: ctx.journal.clone(), data: ctx.data, ..MountOptions::default() };
        let (fs, report) = Fs::open_with_report(dev, opts).map_err(|e| CliError::fs(image, e))?;
        fs.unmount().map_err(|e| CliError::fs(image, e))?;
        if report.orphans_cleaned > 0 {
            outln!("{image}: released {} orphan inode(s)", report.orphans_cleaned);
        }
    }
    if r.damaged() {
        let mut why = Vec::new();
        if let Some(t) = r.failed_commit.filter(|_| r.failed_commit_followed) {
            why.push(format!(
                "transaction {t} failed its commit checksum with later transactions behind it; neither \
                 was replayed"
            ));
        }
        if !r.bad_blocks.is_empty() {
            why.push(format!("{} logged block(s) could not be replayed", r.bad_blocks.len()));
        }
        return Err(CliError::Msg(format!(
            "{image}: the journal was damaged: {}; the intact transactions were replayed and the file \
             system is marked as having errors: repair it with e2fsck -f {image} before writing to it",
            why.join(", ")
        )));
    }
    Ok(())
}
