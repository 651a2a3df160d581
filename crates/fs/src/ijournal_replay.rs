//! Replaying i-transactions at recovery (iJournaling §5.3), after the normal journal.
//!
//! 1. **Scan** every ijournal area whole (records of different cores interleave, and a torn
//!    one does not end the area): a record counts when its header checks, it carries the
//!    area's generation, every extent block matches its tag's checksum and, in the commit
//!    form, its commit block checks and names it.
//! 2. **Valid** records are those whose TxID is beyond the last transaction the normal
//!    replay found committed (older ones are contained in that transaction); of several for
//!    one inode only the newest (highest sub-TxID) counts — each carries the whole inode.
//! 3. **Reachable**: a record is applied only if the entry it brings can be made: its
//!    parent is a live directory, or a new directory whose own record is applied. One
//!    fsync's records are not atomic (a crash may keep the file's and lose its directory's),
//!    and a file with a name in no directory would be lost to the tree anyway.
//! 4. **Rebuild** (`crate::rebuild`), in passes: files' inodes and extent blocks (freeing
//!    what their previous versions owned and no longer map, claiming what they map now);
//!    then new directories, made empty (their blocks allocated now, after every record's
//!    blocks are claimed); then the entries, parents first, each only where the name is free
//!    (or already names the inode), or, for a record whose name reuses one unlinked by a
//!    transaction the normal replay did not find
//!    ([`FLAG_REPLACE`](crate::ondisk::ijournal::FLAG_REPLACE)), where it names an
//!    unlinked non-directory: that entry goes first, and the old inode with its last link.
//!    Bitmaps, descriptors and counters follow from these.
//!
//!    Two records claiming one name: the later one carries the replacement (the earlier
//!    file was unlinked before it was captured) and wins; the earlier is dropped whole.
//! 5. **Commit** the changed blocks as one journal transaction with an id no record exceeds
//!    (`cjfs_journal::external_tx`), and replay it; then **invalidate** the areas (a new
//!    generation) and clear the `cjfs_ijournal` bit, in that order. A cut before the commit
//!    recomputes the same blocks; a cut after it finds the transaction in the log and every
//!    record older than it.
//!
//! Orphans are processed by the mount, as usual; a record never puts an inode on or off the
//! orphan list (an orphan's fsync commits instead).

use std::collections::{BTreeMap, HashMap};

use cjfs_blockdev::{BlockBuf, BlockKind, Device, WriteTag};
use cjfs_journal::JournalArea;
use cjfs_journal::recovery::tid_gt;
use cjfs_journal::ring::LogRing;
use cjfs_journal::superblock::{INCOMPAT_CJFS_IJOURNAL, read_superblock, write_superblock};

use crate::error::FsResult;
use crate::mkfs::read_layout;
use crate::ondisk::ijournal::{AreaHeader, RecordCommit, RecordHeader, chain_csum, payload_csum, seed};
use crate::rebuild::{Rebuild, Skipped};
use crate::types::Ino;

/// What a replay of i-transactions found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IjReplayReport {
    /// Areas with a header of this file system.
    pub areas: u32,
    /// Complete records found.
    pub scanned: u64,
    /// Record headers found whose record is incomplete (torn, overwritten, no commit block).
    pub incomplete: u64,
    /// Complete records no newer than the last committed transaction.
    pub stale: u64,
    /// Valid records superseded by a newer one of the same inode.
    pub superseded: u64,
    /// Records applied.
    pub applied: u64,
    /// Valid records not applied, and why (their entry could not be made).
    pub skipped: Vec<String>,
    /// Blocks the replay changed (committed as one transaction).
    pub blocks: u64,
}

/// One complete record.
struct Rec {
    h: RecordHeader,
    payload: Vec<(u64, BlockBuf)>,
}

/// Scan one area: its complete records of generation `generation`, how many headers of it
/// led nowhere, and whether any record header of the generation was found at all.
fn scan_area(
    dev: &Device,
    area: &JournalArea,
    seed: u32,
    generation: u64,
) -> FsResult<(Vec<Rec>, u64, bool)> {
    let len = area.len();
    let mut blocks = Vec::with_capacity(len as usize);
    for b in 0..len {
        blocks.push(dev.read_block(area.map(b)?)?);
    }
    let ring = LogRing::new(1, len);
    let mut out = Vec::new();
    let mut incomplete = 0;
    let mut any = false;
    for b in 1..len {
        let Some(h) = RecordHeader::decode(seed, &blocks[b as usize]) else { continue };
        if h.generation != generation {
            continue;
        }
        any = true;
        if h.blocks() + 1 > ring.capacity() {
            incomplete += 1;
            continue;
        }
        let mut at = ring.next(b);
        let mut payload = Vec::with_capacity(h.tags.len());
        let mut ok = true;
        for &(home, csum) in &h.tags {
            let img = &blocks[at as usize];
            if payload_csum(seed, img) != csum {
                ok = false;
                break;
            }
            payload.push((home, BlockBuf::from(&img[..])));
            at = ring.next(at);
        }
        if ok && h.commit_form {
            let covered = std::iter::once(&blocks[b as usize][..]).chain(payload.iter().map(|(_, p)| &p[..]));
            let want = chain_csum(seed, covered);
            ok = RecordCommit::decode(seed, &blocks[at as usize]).is_some_and(|c| {
                c.sub == h.sub
                    && c.txid == h.txid
                    && c.generation == generation
                    && c.blocks as usize == 1 + h.tags.len()
                    && c.csum == want
            });
        }
        if ok {
            out.push(Rec { h, payload });
        } else {
            incomplete += 1;
        }
    }
    Ok((out, incomplete, any))
}

/// Before the normal journal in `primary` is replayed: the last transaction it holds
/// committed (what records are judged against), recorded in every area's header, or the one
/// an earlier recovery, cut, recorded there. The normal replay moves the log's sequence one
/// past the first uncommitted id (as JBD2 does), so a recovery run again after it could not
/// tell that id from a committed one.
pub(crate) fn prepare(dev: &Device, primary: &JournalArea, iareas: &[JournalArea]) -> FsResult<u32> {
    let (sb, _) = read_layout(&**dev)?;
    let seed = seed(&sb.uuid);
    let mut headers = Vec::new();
    for area in iareas {
        let raw = dev.read_block(area.map(0)?)?;
        if let Some(h) = AreaHeader::decode(seed, &raw)?
            && u64::from(h.len) == area.len()
        {
            if let Some(m) = h.replay {
                return Ok(m);
            }
            headers.push((area, h));
        }
    }
    let scan = cjfs_journal::recovery::scan(&**dev, primary)?;
    let max =
        if scan.needed { scan.end_tid.wrapping_sub(1) } else { scan.superblock.s_sequence.wrapping_sub(1) };
    let bs = dev.block_size();
    for (area, h) in &headers {
        let marked = AreaHeader { replay: Some(max), ..*h };
        dev.write_block(
            area.map(0)?,
            BlockBuf::from(marked.encode(seed, bs)),
            WriteTag::kind(BlockKind::JournalSuper),
        )?;
    }
    if !headers.is_empty() {
        dev.flush()?;
    }
    Ok(max)
}

/// Replay the i-transactions in `iareas` newer than transaction `max` (see [`prepare`]),
/// then invalidate the areas and clear the private bit. See the module docs.
pub(crate) fn replay(
    dev: &Device,
    primary: &JournalArea,
    iareas: &[JournalArea],
    max: u32,
) -> FsResult<IjReplayReport> {
    let (sb, _) = read_layout(&**dev)?;
    let seed = seed(&sb.uuid);
    let mut report = IjReplayReport::default();
    let mut headers = Vec::new();
    let mut newest: HashMap<Ino, Rec> = HashMap::new();
    for area in iareas {
        let raw = dev.read_block(area.map(0)?)?;
        let Some(h) = AreaHeader::decode(seed, &raw)? else { continue };
        if u64::from(h.len) != area.len() {
            continue;
        }
        report.areas += 1;
        let (recs, incomplete, any) = scan_area(dev, area, seed, h.generation)?;
        // Invalidated below (a new generation) only when it holds records of its generation,
        // else just unmarked: a recovery cut after some areas were done, run again, changes
        // each area once (the image of an uncut run).
        headers.push((area.clone(), h, any));
        report.incomplete += incomplete;
        for r in recs {
            report.scanned += 1;
            if !tid_gt(r.h.txid, max) {
                report.stale += 1;
                continue;
            }
            match newest.get(&r.h.ino) {
                Some(cur) if cur.h.sub >= r.h.sub => report.superseded += 1,
                Some(_) => {
                    report.superseded += 1;
                    newest.insert(r.h.ino, r);
                }
                None => {
                    newest.insert(r.h.ino, r);
                }
            }
        }
    }
    if !newest.is_empty() {
        let min_tid = newest.values().map(|r| r.h.txid).fold(max, |a, t| if tid_gt(t, a) { t } else { a });
        let inode_area = crate::fs::journal_area(dev, &sb)?;
        let rb = Rebuild::open(dev, primary, &inode_area)?;
        let blocks = apply(rb, newest, &mut report)?;
        report.blocks = blocks.len() as u64;
        cjfs_journal::external_tx::commit_and_replay(
            &**dev,
            primary,
            min_tid,
            sb.wtime.max(0) as u64,
            &blocks,
        )?;
    }
    // Everything is home: the records are dead from here on.
    let bs = dev.block_size();
    let mut wrote = false;
    for (area, h, any) in &headers {
        let next = AreaHeader {
            generation: if *any { h.generation.wrapping_add(1) } else { h.generation },
            replay: None,
            ..*h
        };
        if next != *h {
            let img = BlockBuf::from(next.encode(seed, bs));
            dev.write_block(area.map(0)?, img, WriteTag::kind(BlockKind::JournalSuper))?;
            wrote = true;
        }
    }
    if wrote {
        dev.flush()?;
    }
    let mut jsb = read_superblock(&**dev, primary)?;
    if jsb.s_feature_incompat & INCOMPAT_CJFS_IJOURNAL != 0 {
        jsb.s_feature_incompat &= !INCOMPAT_CJFS_IJOURNAL;
        write_superblock(&**dev, primary, &jsb, false)?;
        dev.flush()?;
    }
    Ok(report)
}

/// Whether a record can be applied: not known yet, yes (at a depth below a live
/// directory), or no.
#[derive(Clone, Copy, PartialEq, Eq)]
enum St {
    Unknown,
    Yes(u32),
    No,
}

/// Record `i` claims `key` (its entry's directory and name): `St::Yes(0)` if it gets the
/// name, else `St::No` with the reason in `why[i]`. Two records claim one name only when the
/// earlier one's name was unlinked before the later was captured; the later one then carries
/// `replace` and wins (the earlier, a file, is dropped: it was unlinked). Without `replace`
/// the first claim keeps the name.
fn claim(
    names: &mut BTreeMap<(Ino, Vec<u8>), usize>,
    key: (Ino, Vec<u8>),
    i: usize,
    recs: &[Rec],
    st: &mut [St],
    why: &mut [Option<String>],
) -> St {
    let Some(&other) = names.get(&key) else {
        names.insert(key, i);
        return St::Yes(0);
    };
    let (early, late) = if recs[other].h.sub < recs[i].h.sub { (other, i) } else { (i, other) };
    let late_replaces = recs[late].h.dentry.as_ref().is_some_and(|d| d.replace) && !recs[early].h.dir;
    let (keep, lose) = if late_replaces { (late, early) } else { (other, i) };
    let name = String::from_utf8_lossy(&key.1).into_owned();
    st[lose] = St::No;
    why[lose] = Some(format!(
        "directory {}: {name:?} is claimed by inode {} too, captured {}",
        key.0,
        recs[keep].h.ino,
        if keep == late { "later" } else { "first" }
    ));
    names.insert(key, keep);
    if keep == i { St::Yes(0) } else { St::No }
}

/// Decide which records can be applied and apply them on `rb`; returns the changed blocks.
fn apply(
    rb: Rebuild,
    newest: HashMap<Ino, Rec>,
    report: &mut IjReplayReport,
) -> FsResult<Vec<(u64, BlockBuf)>> {
    // Records in capture order (deterministic, and the first claim of a name wins).
    let mut recs: Vec<Rec> = newest.into_values().collect();
    recs.sort_by_key(|r| r.h.sub);
    let by_ino: HashMap<Ino, usize> = recs.iter().enumerate().map(|(i, r)| (r.h.ino, i)).collect();
    // Reachability, as a fixed point over the records' parents.
    let mut st = vec![St::Unknown; recs.len()];
    let mut why: Vec<Option<String>> = vec![None; recs.len()];
    let mut names: BTreeMap<(Ino, Vec<u8>), usize> = BTreeMap::new();
    // First what the image says about each record on its own.
    for (i, r) in recs.iter().enumerate() {
        let live = rb.live(r.h.ino)?;
        if let Some(d) = &live
            && d.generation != r.h.i_generation
        {
            st[i] = St::No;
            why[i] = Some(format!("inode {} is live with another generation", r.h.ino));
            continue;
        }
        if r.h.dir && live.as_ref().is_some_and(|d| !d.is_dir()) {
            st[i] = St::No;
            why[i] = Some(format!("inode {} is live and not a directory", r.h.ino));
            continue;
        }
        if r.h.dir && crate::ondisk::inode::Inode::decode(&r.h.inode).map_or(true, |d| !d.is_dir()) {
            st[i] = St::No;
            why[i] = Some(format!("inode {}: its record is not a directory's", r.h.ino));
            continue;
        }
        match &r.h.dentry {
            None if live.is_none() => {
                st[i] = St::No;
                why[i] = Some(format!("inode {} has no entry and is not live", r.h.ino));
            }
            None => st[i] = St::Yes(0),
            Some(d) if d.parent == r.h.ino => {
                st[i] = St::No;
                why[i] = Some(format!("inode {} names itself as its parent", r.h.ino));
            }
            Some(d) => {
                if rb.live_dir(d.parent)? {
                    match rb.lookup(d.parent, &d.name)? {
                        None if live.is_some() => {
                            st[i] = St::No;
                            why[i] = Some(format!(
                                "inode {} is live without the entry {:?} in directory {}",
                                r.h.ino,
                                String::from_utf8_lossy(&d.name),
                                d.parent
                            ));
                        }
                        Some(x) if x != r.h.ino && d.replace && !rb.live_dir(x)? => {
                            // The old name was unlinked (not durably): this record takes it.
                            st[i] =
                                claim(&mut names, (d.parent, d.name.clone()), i, &recs, &mut st, &mut why);
                        }
                        Some(x) if x != r.h.ino => {
                            st[i] = St::No;
                            why[i] = Some(format!(
                                "directory {}: {:?} names inode {x}, not {}",
                                d.parent,
                                String::from_utf8_lossy(&d.name),
                                r.h.ino
                            ));
                        }
                        _ => {
                            st[i] = claim(&mut names, (d.parent, d.name.clone()), i, &recs, &mut st, &mut why)
                        }
                    }
                } else if live.is_some() {
                    st[i] = St::No;
                    why[i] = Some(format!("inode {} is live but its parent {} is not", r.h.ino, d.parent));
                }
            }
        }
    }
    loop {
        let mut changed = false;
        for i in 0..recs.len() {
            if st[i] != St::Unknown {
                continue;
            }
            let Some(d) = &recs[i].h.dentry else { continue };
            match by_ino.get(&d.parent).map(|&p| (p, st[p])) {
                Some((p, St::Yes(depth))) if recs[p].h.dir => {
                    let key = (d.parent, d.name.clone());
                    st[i] = match claim(&mut names, key, i, &recs, &mut st, &mut why) {
                        St::Yes(_) => St::Yes(depth + 1),
                        lost => lost,
                    };
                    changed = true;
                }
                Some((_, St::Unknown)) => {}
                _ => {
                    st[i] = St::No;
                    why[i] = Some(format!(
                        "inode {}: its directory {} is neither live nor restored",
                        recs[i].h.ino, d.parent
                    ));
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for i in 0..recs.len() {
        if st[i] == St::Unknown {
            st[i] = St::No;
            why[i] = Some(format!("inode {}: its directories form a cycle", recs[i].h.ino));
        }
    }
    // Pass A: files.
    for (i, r) in recs.iter().enumerate() {
        if r.h.dir || st[i] == St::No {
            continue;
        }
        let links = u16::from(r.h.dentry.is_some());
        if let Err(Skipped(w)) = rb.install_file(r.h.ino, &r.h.inode, &r.payload, links)? {
            st[i] = St::No;
            why[i] = Some(w);
        }
    }
    rb.sync()?;
    // Pass B: new directories (their blocks allocated only now).
    for (i, r) in recs.iter().enumerate() {
        if !r.h.dir || st[i] == St::No || rb.live(r.h.ino)?.is_some() {
            continue;
        }
        let parent = r.h.dentry.as_ref().map_or(crate::types::ROOT_INO, |d| d.parent);
        if let Err(Skipped(w)) = rb.create_dir(r.h.ino, &r.h.inode, parent)? {
            // Nothing below it can be reached: drop those too.
            st[i] = St::No;
            why[i] = Some(w);
        }
    }
    rb.sync()?;
    // Descendants of a directory that could not be made are not linked (their inodes,
    // installed already, would then be unreachable): a directory that fails here fails only
    // on a damaged image, so the whole replay stops instead.
    for i in 0..recs.len() {
        if let (St::Yes(_), Some(d)) = (st[i], &recs[i].h.dentry)
            && let Some(&p) = by_ino.get(&d.parent)
            && recs[p].h.dir
            && st[p] == St::No
        {
            return Err(crate::FsError::Corrupt(format!(
                "ijournal replay: directory inode {} could not be restored ({}), but inode {} below it was",
                d.parent,
                why[p].clone().unwrap_or_default(),
                recs[i].h.ino
            )));
        }
    }
    // Pass C: the entries, parents first.
    let mut order: Vec<usize> = (0..recs.len()).filter(|&i| matches!(st[i], St::Yes(_))).collect();
    order.sort_by_key(|&i| match st[i] {
        St::Yes(d) => (d, recs[i].h.sub),
        _ => (u32::MAX, 0),
    });
    for &i in &order {
        let r = &recs[i];
        if let Some(d) = &r.h.dentry
            && let Err(Skipped(w)) = rb.link(d.parent, &d.name, r.h.ino, d.ftype, d.replace)?
        {
            return Err(crate::FsError::Corrupt(format!("ijournal replay: {w}")));
        }
        report.applied += 1;
    }
    for (i, w) in why.into_iter().enumerate() {
        if st[i] == St::No
            && let Some(w) = w
        {
            report.skipped.push(w);
        }
    }
    rb.finish()
}
