//! Presets by name, resolved in one place: everything a preset means for a mount. Today that
//! is the journal's settings (`JournalConfig::preset`); file-system-level techniques that a
//! preset switches join them here, so `cjfs mount`, the CLI, `cjfs bench`, `cjfs crashtest`,
//! the FUSE `-o journal=` option and the lab never resolve a name themselves.

use cjfs_journal::{JournalConfig, JournalKind};

use crate::types::MountOptions;

/// A preset name nobody knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown preset {name:?} (presets: {})", names().join(", "))]
pub struct UnknownPreset {
    /// The name asked for.
    pub name: String,
}

/// Every preset name, the default (`auto`) first.
pub fn names() -> &'static [&'static str] {
    JournalConfig::preset_names()
}

/// `base` with everything preset `name` sets (the journal and its techniques); what a
/// preset does not decide (data mode, cache size, read-only) stays the caller's.
pub fn apply(name: &str, base: MountOptions) -> Result<MountOptions, UnknownPreset> {
    let journal = JournalConfig::preset(name).ok_or_else(|| UnknownPreset { name: name.to_string() })?;
    Ok(MountOptions { journal, ..base })
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
}
