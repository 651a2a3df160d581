//! Presets by name, resolved in one place: everything a preset means for a mount. Today that
//! is the journal's settings (`JournalConfig::preset`); file-system-level techniques that a
//! preset switches join them here, so `cjfs mount`, the CLI, `cjfs bench`, `cjfs crashtest`,
//! the FUSE `-o journal=` option and the lab never resolve a name themselves.

use cjfs_journal::polling::WaitMode;
use cjfs_journal::{CommitMode, JournalConfig, JournalKind, Logs};

use crate::types::{LeaveMode, MountOptions};

/// A preset name nobody knows, or a setting after it that does not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", match why {
    None => format!("unknown preset {name:?} (presets: {})", names().join(", ")),
    Some(w) => format!("preset {name:?}: {w}"),
})]
pub struct UnknownPreset {
    /// The name (with its settings) asked for.
    pub name: String,
    /// What is wrong with a setting (`None`: the preset itself is unknown).
    pub why: Option<String>,
}

/// Technique settings a preset name may carry after `+`, for measuring one technique on top
/// of a preset before any preset turns it on: `cjfs+dispatch=per_core`.
pub const SETTINGS: &str = "wait=condvar|spin_park, dispatch=shared|per_core, logs=N|cores, fsync=all_logs|chained, admit=core|thread, log_flush=auto|shared|per_log, commit=single_io|two_step, osum=on|off, adaptive=on|off, leave=empty|revoke, checkpoint=all|oldest, ijournal=off|cores|N, iform=single|commit, idata=own|grouped, iarea=BLOCKS";

/// Every preset name, the default (`auto`) first.
pub fn names() -> &'static [&'static str] {
    JournalConfig::preset_names()
}

/// `base` with everything preset `spec` sets (the journal and its techniques); what a
/// preset does not decide (data mode, cache size, read-only) stays the caller's. `spec` is a
/// preset name, optionally followed by settings (`+KEY=VALUE`, see [`SETTINGS`]).
pub fn apply(spec: &str, base: MountOptions) -> Result<MountOptions, UnknownPreset> {
    let mut parts = spec.split('+');
    let name = parts.next().unwrap_or_default();
    let bad = |why: String| UnknownPreset { name: spec.to_string(), why: Some(why) };
    let mut journal =
        JournalConfig::preset(name).ok_or_else(|| UnknownPreset { name: spec.to_string(), why: None })?;
    // Journaling of journal's automatic per-file data mode is the file system's.
    let mut adaptive = name == "adaptive";
    // Journaling of journal's presets leave data journaling by revoke; the others as ext4.
    let mut leave = if matches!(name, "joj" | "adaptive") { LeaveMode::Revoke } else { LeaveMode::Empty };
    // Whether the settings name `osum`: the preset's own default yields to a setting it
    // cannot combine with (`adaptive+commit=two_step`, `adaptive+ijournal=cores`).
    let mut osum_named = false;
    for setting in parts {
        if journal.per_device {
            return Err(bad("`auto` chooses every setting per device; name a preset to change one".into()));
        }
        match setting.split_once('=') {
            Some(("wait", "condvar")) => journal.wait = WaitMode::Condvar,
            Some(("wait", "spin_park")) => journal.wait = WaitMode::SpinPark,
            Some(("dispatch", "shared")) => journal.dispatch = cjfs_journal::work_queue::Dispatch::Shared,
            Some(("dispatch", "per_core")) => journal.dispatch = cjfs_journal::work_queue::Dispatch::PerCore,
            Some(("logs", n)) => journal.logs = n.parse().map_err(bad)?,
            Some(("fsync", "all_logs")) => journal.fsync_all_logs = true,
            Some(("fsync", "chained")) => journal.fsync_all_logs = false,
            Some(("admit", "core")) => journal.admission = cjfs_journal::per_core::Admission::Core,
            Some(("admit", "thread")) => journal.admission = cjfs_journal::per_core::Admission::Thread,
            Some(("log_flush", "auto")) => journal.log_flush = cjfs_journal::LogFlush::Auto,
            Some(("log_flush", "shared")) => journal.log_flush = cjfs_journal::LogFlush::Shared,
            Some(("log_flush", "per_log")) => journal.log_flush = cjfs_journal::LogFlush::PerLog,
            Some(("ijournal", n)) => journal.ijournal.areas = n.parse().map_err(bad)?,
            Some(("iform", "single")) => journal.ijournal.form = cjfs_journal::IForm::Single,
            Some(("iform", "commit")) => journal.ijournal.form = cjfs_journal::IForm::Commit,
            Some(("idata", "own")) => journal.ijournal.data = cjfs_journal::IData::Own,
            Some(("idata", "grouped")) => journal.ijournal.data = cjfs_journal::IData::Grouped,
            Some(("iarea", n)) => {
                let min = cjfs_journal::superblock::MIN_IJOURNAL_AREA_BLOCKS;
                journal.ijournal.area_blocks =
                    n.parse::<u32>().ok().filter(|&b| b >= min).ok_or_else(|| {
                        bad(format!("iarea={n}: expected a number of blocks, at least {min}"))
                    })?;
            }
            Some(("commit", "single_io")) => journal.commit = CommitMode::SingleIo,
            Some(("commit", "two_step")) => journal.commit = CommitMode::TwoStep,
            Some(("osum", "on")) => (journal.ordered_sums, osum_named) = (true, true),
            Some(("osum", "off")) => (journal.ordered_sums, osum_named) = (false, true),
            Some(("adaptive", "on")) => adaptive = true,
            Some(("adaptive", "off")) => adaptive = false,
            Some(("leave", "empty")) => leave = LeaveMode::Empty,
            Some(("leave", "revoke")) => leave = LeaveMode::Revoke,
            Some(("checkpoint", "all")) => journal.checkpoint_scope = cjfs_journal::CheckpointScope::All,
            Some(("checkpoint", "oldest")) => {
                journal.checkpoint_scope = cjfs_journal::CheckpointScope::Oldest
            }
            _ => return Err(bad(format!("unknown setting {setting:?} (settings: {SETTINGS})"))),
        }
        journal.name = spec.to_string();
    }
    if journal.ijournal.on() && journal.logs != Logs::One {
        return Err(bad(
            "iJournaling cannot be combined with several logs (i-transactions are ordered by one \
             log's transaction ids)"
                .into(),
        ));
    }
    // Core-aware block-group allocation goes with per-core logs, except in its ablation.
    let core_groups = journal.logs != Logs::One && name != "zjournal-no-bga";
    let osum_fits = journal.commit == CommitMode::SingleIo && !journal.ijournal.on();
    if journal.ordered_sums && !osum_fits && !osum_named {
        journal.ordered_sums = false;
    }
    if journal.ordered_sums && !osum_fits {
        return Err(bad(
            "osum=on (ordered-data checksums) needs the single-I/O commit and no iJournaling".into()
        ));
    }
    if journal.commit == CommitMode::SingleIo && journal.logs != Logs::One {
        return Err(bad("the single-I/O commit runs one log (per-core journaling has several)".into()));
    }
    Ok(MountOptions { journal, core_groups, adaptive, leave, ..base })
}

/// Blocks of each extra log area a per-core journal gets from [`mkfs_for`].
pub const LOG_AREA_BLOCKS: u32 = 4096;

/// `base` with the extra areas the journal of `opts` runs: a per-core journal's logs
/// (`area_blocks` each, at least 1024; none for one log) and iJournaling's areas (as many and
/// as large as its setting says), made at mkfs.
pub fn mkfs_for(opts: &MountOptions, area_blocks: u32, base: crate::MkfsOptions) -> crate::MkfsOptions {
    let extra = opts.journal.logs.wanted().saturating_sub(1);
    let ij = &opts.journal.ijournal;
    crate::MkfsOptions {
        log_areas: vec![area_blocks.max(1024); extra],
        ijournal_areas: vec![ij.area_blocks; ij.areas.wanted()],
        ..base
    }
}

/// The mount options preset `name` stands for, over the defaults.
pub fn resolve(name: &str) -> Result<MountOptions, UnknownPreset> {
    apply(name, MountOptions::default())
}

/// Whether a preset promises crash consistency at all (`nojournal` does not).
pub fn crash_consistent(name: &str) -> Result<bool, UnknownPreset> {
    Ok(resolve(name)?.journal.kind != JournalKind::None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DataMode;

    #[test]
    fn every_name_resolves_and_keeps_what_the_preset_does_not_decide() {
        for n in names() {
            let base = MountOptions { data: DataMode::Journal, cache_blocks: 77, ..MountOptions::default() };
            let o = apply(n, base).unwrap();
            assert_eq!(o.journal.name, *n);
            assert_eq!((o.data, o.cache_blocks), (DataMode::Journal, 77));
        }
        assert_eq!(names()[0], "auto");
        assert!(!crash_consistent("nojournal").unwrap());
        assert!(crash_consistent("jbd2").unwrap());
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_list() {
        let e = resolve("jbd3").unwrap_err();
        assert_eq!(e.name, "jbd3");
        let m = e.to_string();
        assert!(m.starts_with("unknown preset \"jbd3\" (presets: auto, jbd2"), "{m}");
    }

    #[test]
    fn settings_after_a_preset_change_only_that_technique() {
        let o = resolve("cjfs+wait=condvar").unwrap();
        assert_eq!(o.journal.wait, WaitMode::Condvar);
        assert_eq!(o.journal.name, "cjfs+wait=condvar");
        let plain = resolve("cjfs").unwrap().journal;
        // The cjfs family polls; its ablation and the combinations with other papers do not.
        assert_eq!(plain.wait, WaitMode::SpinPark);
        assert_eq!(resolve("cjfs-no-dual").unwrap().journal.wait, WaitMode::SpinPark);
        let condvar = resolve("cjfs-condvar").unwrap().journal;
        assert_eq!(
            JournalConfig { wait: WaitMode::Condvar, name: condvar.name.clone(), ..plain.clone() },
            condvar
        );
        for name in ["zjournal", "zjournal-cjfs", "ijournal-cjfs", "jbd2"] {
            assert_eq!(resolve(name).unwrap().journal.wait, WaitMode::Condvar, "{name}");
        }
        assert_eq!(JournalConfig { wait: plain.wait, name: plain.name.clone(), ..o.journal }, plain);
        assert_eq!(resolve("jbd2+wait=condvar").unwrap().journal.wait, WaitMode::Condvar);
        let z = resolve("zjournal+logs=4").unwrap();
        assert_eq!((z.journal.logs, z.core_groups), (Logs::Count(4), true));
        assert!(!resolve("zjournal-no-bga").unwrap().core_groups);
        assert!(!resolve("cjfs").unwrap().core_groups);
        assert!(resolve("zjournal+logs=0").is_err());
        assert_eq!(resolve("zjournal").unwrap().journal.log_flush, cjfs_journal::LogFlush::Auto);
        let shared = resolve("zjournal-cjfs+log_flush=shared").unwrap().journal.log_flush;
        assert_eq!(shared, cjfs_journal::LogFlush::Shared);
        assert_eq!(
            resolve("zjournal+log_flush=per_log").unwrap().journal.log_flush,
            cjfs_journal::LogFlush::PerLog
        );
        let e = resolve("cjfs+wait=fast").unwrap_err().to_string();
        assert!(e.contains("unknown setting \"wait=fast\""), "{e}");
        assert!(resolve("auto+wait=spin_park").unwrap_err().to_string().contains("per device"));
        // Journaling of journal combines with the CJFS techniques.
        let c = resolve("cjfs+commit=single_io+adaptive=on").unwrap();
        assert_eq!(
            (c.journal.commit, c.adaptive, c.journal.multi_version),
            (CommitMode::SingleIo, true, true)
        );
        let a = resolve("adaptive").unwrap();
        assert_eq!(
            (a.journal.commit, a.adaptive, a.journal.ordered_sums),
            (CommitMode::SingleIo, true, true)
        );
        assert!(!resolve("adaptive+osum=off").unwrap().journal.ordered_sums);
        // The preset's checksums yield to a setting they cannot go with; named, they refuse.
        assert!(!resolve("adaptive+commit=two_step").unwrap().journal.ordered_sums);
        assert!(!resolve("adaptive+ijournal=cores").unwrap().journal.ordered_sums);
        assert!(resolve("adaptive+osum=on+commit=two_step").unwrap_err().to_string().contains("osum=on"));
        assert!(!resolve("joj").unwrap().adaptive);
        assert_eq!(resolve("joj+commit=two_step").unwrap().journal.commit, CommitMode::TwoStep);
        assert!(resolve("zjournal+commit=single_io").unwrap_err().to_string().contains("one log"));
    }
}
