//! `cjfs info`: superblock and journal summary. Opens the image read-only and never writes.
//!
//! Prints everything it can read. When the image cannot be used by cjfs (unsupported
//! features, truncated, damaged journal) it still prints what it found, then fails with
//! the first problem as its one-line error.

use crate::image::User;
use cjfs_blockdev::Device;
use cjfs_fs::mkfs::read_layout_for;
use cjfs_fs::ondisk::features::{self, Access, INCOMPAT_RECOVER};
use cjfs_fs::ondisk::superblock::{STATE_ERROR, STATE_ORPHAN, STATE_VALID, Superblock};
use cjfs_fs::{FsResult, PendingOrphans};
use cjfs_journal::recovery::{ScanResult, ScanStop, scan};
use cjfs_journal::superblock::{
    AreaKind, COMPAT_CHECKSUM, INCOMPAT_CJFS_IJOURNAL, INCOMPAT_CJFS_LOGS, JournalSuperblock,
    incompat_feature_names, read_log_areas, read_superblock,
};
use cjfs_journal::{JournalArea, JournalError};

use crate::error::{CliError, CliResult};
use crate::fmt::{human_bytes, sb_time, uuid};
use crate::image::{check_not_truncated, open_device, read_primary_superblock};
use crate::out::outln;

/// Run `cjfs info`.
pub fn run(image: &str, journal: &cjfs_journal::JournalConfig) -> CliResult<()> {
    let dev = open_device(image, true)?;
    let sb = read_primary_superblock(image, &dev)?;
    let mut problem: Option<CliError> = None;
    let mut note = |e: CliError| {
        if problem.is_none() {
            problem = Some(e);
        }
    };
    // Readable is enough for `info`; a file system cjfs only reads is said so below.
    let supported = match features::check_supported_for(&sb, Access::ReadOnly) {
        Ok(()) => true,
        Err(e) => {
            note(CliError::fs(image, e));
            false
        }
    };
    if let Err(e) = check_not_truncated(image, &dev, &sb) {
        note(e);
    }
    let desc_free = match read_layout_for(&*dev, Access::ReadOnly) {
        Ok((_, descs)) => Some((
            descs.iter().map(|d| u64::from(d.free_blocks_count)).sum::<u64>(),
            descs.iter().map(|d| u64::from(d.free_inodes_count)).sum::<u64>(),
        )),
        Err(e) => {
            note(CliError::fs(image, e));
            None
        }
    };
    print_superblock(image, &dev, &sb, desc_free, supported)?;
    if sb.has_journal() {
        outln!("Journal:");
        // What a mount of this image would run: the preset named, or the one `auto` picks
        // for this device, and why.
        match journal.resolve_for(&dev.caps()) {
            (_, Some(why)) => outln!("  preset (auto):       {why}"),
            (c, None) => outln!("  preset:              {}", c.name),
        }
        match print_journal(image, &dev, &sb) {
            Ok(()) => {}
            Err(e) if supported => {
                outln!("  error:               {e}");
                note(e);
            }
            // A refused feature's layout may not be what the journal's lookup assumes: the
            // feature is the error, not this symptom of it.
            Err(_) => outln!("  not read:            the file system is refused (below)"),
        }
    } else {
        outln!("Journal:               none (has_journal is off)");
    }
    match problem {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The `State:` line. "needs-recovery" comes from two places, said apart: the
/// superblock's `needs_recovery` flag (set by every journaled mount until its clean
/// unmount) and the journal's logs holding transactions (the `needs recovery:` line of the
/// journal section, per log). Both are what a running mount looks like too, so when the
/// kernel has the image mounted or another process holds its writer lock (`user`) the state
/// says that instead. Orphans recorded on disk (`orphans`: the classic list, the orphan
/// file, or `orphan_present` alone) are work the next read-write mount or `cjfs recover`
/// does, so an image holding them is never called "clean".
fn state_string(
    sb: &Superblock,
    journal_dirty: Option<bool>,
    user: Option<User>,
    orphans: Option<&FsResult<PendingOrphans>>,
) -> String {
    let mut parts: Vec<String> = Vec::new();
    // cjfs replays only what it may write.
    let recover = if features::read_only_features(sb).is_empty() {
        "`cjfs recover`"
    } else {
        "`e2fsck -fy` or a kernel mount (cjfs only reads this file system)"
    };
    let flag = sb.has_incompat(INCOMPAT_RECOVER);
    let logs = journal_dirty == Some(true);
    let in_use = user.is_some();
    if (flag || logs)
        && let Some(User::Kernel(by)) = &user
    {
        parts.push(format!(
            "in use: the kernel has it mounted ({by}) and its journal is live; unmount it first"
        ));
    } else if (flag || logs) && in_use {
        parts.push(
            "in use: another cjfs process (a cjfs mount or writer) holds the image's writer lock and \
             its journal is live (the needs_recovery flag stays set while it runs); unmount it first"
                .into(),
        );
    } else if logs {
        parts.push(format!("needs-recovery: the journal holds transactions to replay; run {recover}"));
    } else if flag {
        parts.push(format!(
            "needs-recovery: the superblock's needs_recovery flag is set but the journal holds \
             nothing to replay (not unmounted cleanly); {recover} clears the flag"
        ));
    }
    // A running mount records orphans as it goes: only a stopped image's are pending.
    let pending = match orphans {
        _ if in_use => None,
        None => None,
        Some(Ok(o)) if o.count() > 0 => {
            Some(format!("orphans pending: {} inode(s); {recover} frees them", o.count()))
        }
        Some(Ok(o)) if o.present_flag => Some(format!(
            "orphans pending: the orphan_present flag is set (not unmounted cleanly); {recover} \
             clears it"
        )),
        Some(Ok(_)) => None,
        Some(Err(e)) => Some(format!("orphan records unreadable: {e}")),
    };
    let recovering = !parts.is_empty();
    if let Some(p) = pending {
        parts.push(p);
    } else if !recovering {
        parts.push(if sb.state & STATE_VALID != 0 { "clean" } else { "not clean" }.into());
    }
    match &user {
        Some(User::Kernel(by)) if !(flag || logs) => parts.push(format!("in use by the kernel ({by})")),
        Some(User::Cjfs) if !(flag || logs) => {
            parts.push("in use by another cjfs process (it holds the image's writer lock)".into())
        }
        _ => {}
    }
    if sb.state & STATE_ERROR != 0 {
        parts.push("errors".into());
    }
    if sb.state & STATE_ORPHAN != 0 {
        parts.push("orphans being recovered".into());
    }
    parts.join(", ")
}

fn print_superblock(
    image: &str,
    dev: &Device,
    sb: &Superblock,
    desc_free: Option<(u64, u64)>,
    supported: bool,
) -> CliResult<()> {
    let bs = u64::from(sb.block_size());
    let journal_dirty = cjfs_fs::fs::journal_logs(dev, sb)
        .ok()
        .and_then(|(j, areas)| cjfs_fs::fs::logs_need_recovery(dev, &j, &areas).ok());
    let label = sb.label();
    outln!(
        "Image:                 {image} ({} bytes on the device)",
        dev.num_blocks() * dev.block_size() as u64
    );
    outln!("Label:                 {}", if label.is_empty() { "<none>" } else { &label });
    outln!("UUID:                  {}", uuid(&sb.uuid));
    // Orphan records of a refused image are not read: its error names the feature instead.
    let orphans = supported.then(|| cjfs_fs::pending_orphans(dev));
    outln!(
        "State:                 {}",
        state_string(sb, journal_dirty, crate::image::in_use(image), orphans.as_ref())
    );
    outln!("Features:              {}", features::feature_names(sb).join(" "));
    let read_only = features::read_only_features(sb);
    let mut bad = features::unsupported_features(sb);
    bad.retain(|f| !read_only.contains(f));
    if !bad.is_empty() {
        outln!("Unsupported features:  {}", bad.join(" "));
    }
    if !read_only.is_empty() {
        outln!("Read-only features:    {} (not maintained by cjfs: opened read-only)", read_only.join(" "));
    }
    outln!("Revision:              {}.{}", sb.rev_level, sb.minor_rev_level);
    outln!("Block size:            {bs}");
    outln!("Size:                  {} ({} bytes)", human_bytes(sb.block_count() * bs), sb.block_count() * bs);
    outln!(
        "Blocks:                {} total, {} free, {} reserved for root",
        sb.block_count(),
        sb.free_blocks(),
        sb.reserved_blocks()
    );
    outln!("Inodes:                {} total, {} free", sb.inodes_count, sb.free_inodes_count);
    if let Some((fb, fi)) = desc_free {
        outln!("Free (group counts):   {fb} blocks, {fi} inodes");
    }
    outln!(
        "Groups:                {} ({} blocks, {} inodes per group; {} per flex group)",
        sb.group_count(),
        sb.blocks_per_group,
        sb.inodes_per_group,
        sb.groups_per_flex()
    );
    outln!("Inode size:            {} (first inode {})", sb.inode_size(), sb.first_ino());
    if sb.has_incompat(features::INCOMPAT_CASEFOLD) {
        let name = if sb.encoding == features::ENCODING_UTF8_12_1 { "utf8-12.1" } else { "unknown" };
        let strict = if sb.encoding_flags & features::ENCODING_STRICT != 0 { ", strict" } else { "" };
        outln!("Filename encoding:     {name} (s_encoding {}{strict})", sb.encoding);
    }
    outln!("Mount count:           {} (maximum {})", sb.mnt_count, sb.max_mnt_count);
    outln!("Created:               {}", sb_time(sb.mkfs_time));
    outln!("Last mounted:          {}", sb_time(sb.mtime));
    outln!("Last written:          {}", sb_time(sb.wtime));
    outln!("Last checked:          {}", sb_time(sb.lastcheck));
    if sb.last_orphan != 0 {
        outln!("Orphan list head:      inode {}", sb.last_orphan);
    }
    if let Some(Ok(o)) = &orphans
        && !o.file.is_empty()
    {
        outln!("Orphan file entries:   {}", o.file.len());
    }
    if sb.error_count != 0 {
        outln!("Errors recorded:       {}", sb.error_count);
    }
    match cjfs_fs::mmp::read(dev, sb) {
        None => {}
        Some(Ok(m)) => outln!(
            "MMP:                   block {}, update interval {} s: {}",
            sb.mmp_block,
            sb.mmp_interval,
            m.state()
        ),
        Some(Err(e)) => outln!("MMP:                   block {}: unreadable: {e}", sb.mmp_block),
    }
    Ok(())
}

fn journal_feature_names(j: &JournalSuperblock) -> String {
    let f = j.features();
    let mut v = Vec::new();
    if f.compat & COMPAT_CHECKSUM != 0 {
        v.push("checksum".to_string());
    }
    for name in incompat_feature_names(f.incompat) {
        // Unknown bits come last, together, in hex.
        v.push(if name.starts_with("0x") { format!("incompat:{name}") } else { name });
    }
    if f.compat & !COMPAT_CHECKSUM != 0 {
        v.push(format!("compat:0x{:x}", f.compat & !COMPAT_CHECKSUM));
    }
    if f.ro_compat != 0 {
        v.push(format!("ro_compat:0x{:x}", f.ro_compat));
    }
    if v.is_empty() { "(none)".to_string() } else { v.join(" ") }
}

fn print_journal(image: &str, dev: &Device, sb: &Superblock) -> CliResult<()> {
    let area: JournalArea = cjfs_fs::fs::journal_area(dev, sb).map_err(|e| CliError::fs(image, e))?;
    outln!(
        "  inode:               {} ({} blocks, {}, in {} extent(s))",
        sb.journal_inum,
        area.len(),
        human_bytes(area.len() * u64::from(sb.block_size())),
        area.extents().len()
    );
    let jerr = |e: JournalError| CliError::Journal { image: image.to_string(), source: e };
    let (j, _) = read_log_areas(&**dev, &area).map_err(jerr)?;
    let version = match j.blocktype {
        3 => "v1".to_string(),
        4 => "v2".to_string(),
        t => format!("type {t}"),
    };
    outln!(
        "  superblock:          {version}, block size {}, {} blocks, log starts at block {}",
        j.s_blocksize,
        j.s_maxlen,
        j.s_first
    );
    outln!("  features:            {}", journal_feature_names(&j));
    outln!("  sequence:            {} (first transaction expected)", j.s_sequence);
    outln!(
        "  start:               {}{}",
        j.s_start,
        if j.s_start == 0 { " (log empty)" } else { " (log holds transactions)" }
    );
    if j.s_errno != 0 {
        outln!("  errno:               {} (the journal was aborted)", j.s_errno);
    }
    outln!("  uuid:                {}", uuid(&j.s_uuid));
    outln!("  users:               {}", j.s_nr_users);
    // This log only (`s_start`); the superblock's flag and the other logs are in `State:`.
    outln!(
        "  needs recovery:      {}",
        if j.needs_recovery() {
            "yes (this log holds transactions to replay)"
        } else {
            "no (this log holds nothing to replay; State above also weighs the superblock's flag and \
             the other logs)"
        }
    );
    let s = scan(&**dev, &area).map_err(jerr)?;
    print_scan(&s)?;
    print_log_areas(image, dev, &area, &j)
}

/// The extra log areas the primary journal's table lists, each with its own superblock state.
fn print_log_areas(image: &str, dev: &Device, inode: &JournalArea, j: &JournalSuperblock) -> CliResult<()> {
    if j.log_areas.is_empty() {
        outln!("  log areas:           the journal only");
        return Ok(());
    }
    let logs = j.log_areas.iter().filter(|a| a.kind == AreaKind::Log).count();
    let ijournal = j.log_areas.len() - logs;
    if ijournal > 0 {
        outln!(
            "  ijournal areas:      {ijournal} (cjfs_ijournal bit {})",
            if j.s_feature_incompat & INCOMPAT_CJFS_IJOURNAL != 0 {
                "set: they may hold i-transactions; stock tools refuse the image until `cjfs recover` or a clean unmount"
            } else {
                "clear: no live i-transaction"
            }
        );
    }
    outln!(
        "  log areas:           {logs} besides the journal (cjfs_logs bit {})",
        if j.s_feature_incompat & INCOMPAT_CJFS_LOGS != 0 {
            "set: stock tools refuse the image until `cjfs recover` or a clean unmount"
        } else {
            "clear"
        }
    );
    let jerr = |e: JournalError| CliError::Journal { image: image.to_string(), source: e };
    let (mut nl, mut ni) = (0, 0);
    for a in &j.log_areas {
        let area =
            inode.slice(u64::from(a.first), u64::from(a.len)).map_err(|e| jerr(JournalError::Device(e)))?;
        if a.kind == AreaKind::IJournal {
            ni += 1;
            outln!(
                "    ijournal area {ni}:     journal blocks {}..{} ({})",
                a.first,
                u64::from(a.first) + u64::from(a.len),
                human_bytes(u64::from(a.len) * u64::from(j.s_blocksize))
            );
            continue;
        }
        nl += 1;
        let i = nl - 1;
        let state = match read_superblock(&**dev, &area) {
            Ok(s) if s.needs_recovery() => {
                format!("holds transactions from {} (needs recovery)", s.s_sequence)
            }
            Ok(s) => format!("empty, next transaction {}", s.s_sequence),
            Err(e) => format!("unreadable: {e}"),
        };
        outln!(
            "    log {}:               journal blocks {}..{} ({}), {state}",
            i + 1,
            a.first,
            u64::from(a.first) + u64::from(a.len),
            human_bytes(u64::from(a.len) * u64::from(j.s_blocksize))
        );
    }
    Ok(())
}

fn stop_string(s: &ScanStop) -> String {
    match s {
        ScanStop::Clean => "log is clean (nothing scanned)".into(),
        ScanStop::NoMagic { log_block } => format!("end of log at block {log_block} (no journal magic)"),
        ScanStop::SequenceMismatch { log_block, found, expected } => {
            format!("end of log at block {log_block} (sequence {found}, expected {expected})")
        }
        ScanStop::UnknownBlockType { log_block, blocktype } => {
            format!("unknown block type {blocktype} at block {log_block}")
        }
        ScanStop::FastCommitBlock { log_block } => format!("fast-commit block at block {log_block}"),
        ScanStop::StaleTransaction { tid, log_block } => {
            format!("stale transaction {tid} (commit block {log_block} fails its checksum)")
        }
        ScanStop::CommitChecksum { tid, log_block } => {
            format!("transaction {tid}'s commit block fails its checksum (block {log_block})")
        }
        ScanStop::LogExhausted => "went once around the log without finding its end".into(),
        ScanStop::DataNotDurable { tid, block: Some(b) } => format!(
            "transaction {tid}'s ordered data is not on the device (block {b} differs from its commit \
             block's sum): never acknowledged, not replayed"
        ),
        ScanStop::DataNotDurable { tid, block: None } => {
            format!("transaction {tid}'s commit block is torn (its ordered-data sums): not replayed")
        }
    }
}

fn print_scan(s: &ScanResult) -> CliResult<()> {
    if !s.needed {
        outln!("  scan:                nothing to replay");
        return Ok(());
    }
    let n = s.transaction_count();
    outln!(
        "  scan:                {n} transaction(s) to replay, tids {}..{} (end {}), log blocks {}..{}",
        s.start_tid,
        s.end_tid.wrapping_sub(1),
        s.end_tid,
        s.start_block,
        s.head_block
    );
    outln!("  scan stopped:        {}", stop_string(&s.stop));
    if let Some(t) = s.failed_commit {
        outln!("  failed commit:       transaction {t} (replay stops before it)");
    }
    const SHOW: usize = 20;
    for t in s.transactions.iter().take(SHOW) {
        outln!(
            "    tid {:>10}: blocks {}..{}, {} logged block(s), {} descriptor(s), {} revoke record(s), \
             committed {}",
            t.tid,
            t.first_block,
            t.commit_block,
            t.data_blocks,
            t.descriptor_blocks,
            t.revoke_records,
            sb_time(t.commit_sec as i64)
        );
    }
    if s.transactions.len() > SHOW {
        outln!("    ... and {} more", s.transactions.len() - SHOW);
    }
    Ok(())
}
