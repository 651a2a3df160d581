//! Journal configuration: every technique is a setting here, and the named presets pick a
//! combination.

use std::time::Duration;

/// Where committed metadata goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalKind {
    /// Write-ahead log in the JBD2 on-disk format.
    Jbd2,
    /// No journal: metadata is written in place at commit, no crash consistency. The upper
    /// bound the papers compare against.
    None,
}

/// Deliberate bugs the crash harness must catch. Test use only: every one of them breaks
/// crash consistency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlantedBugs {
    /// Do not flush before writing the commit block.
    pub skip_preflush: bool,
    /// Write the commit block before the logged blocks.
    pub commit_before_data: bool,
    /// Do not write revoke records.
    pub drop_revokes: bool,
}

/// Every journal setting.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalConfig {
    /// Preset name this configuration came from (for reports).
    pub name: String,
    /// Log or no log.
    pub kind: JournalKind,
    /// Let transaction n+1 commit while n is still flushing (dual-thread journaling). When
    /// false the commit thread waits for the previous transaction to be durable first (JBD2).
    pub dual_thread: bool,
    /// Versions of one buffer that may be in flight at once (1 = JBD2's single frozen copy).
    pub max_versions: u32,
    /// Release a buffer's version when its log write completes (JBD2's shadow buffer) rather
    /// than when its transaction is durable.
    pub release_on_log_write: bool,
    /// Commit interval (the 5 s timer).
    pub commit_interval: Duration,
    /// Maximum blocks in one transaction; `None` = a quarter of the log, as JBD2.
    pub max_tx_blocks: Option<u32>,
    /// Ordered data blocks after which the running transaction is committed.
    pub max_ordered_blocks: u32,
    /// Start background checkpointing when the log is this full (0..1).
    pub checkpoint_high_water: f64,
    /// Write csum-v3 tags and block checksums.
    pub csum_v3: bool,
    /// Test-only planted bugs.
    pub bugs: PlantedBugs,
}

impl JournalConfig {
    /// JBD2 as in ext4: one running and one committing transaction, serial commit, one frozen
    /// copy per buffer, a cache flush before and a FUA-like flush after the commit block.
    pub fn jbd2() -> Self {
        JournalConfig {
            name: "jbd2".into(),
            kind: JournalKind::Jbd2,
            dual_thread: false,
            max_versions: 1,
            release_on_log_write: true,
            commit_interval: Duration::from_secs(5),
            max_tx_blocks: None,
            max_ordered_blocks: 16384,
            checkpoint_high_water: 0.5,
            csum_v3: true,
            bugs: PlantedBugs::default(),
        }
    }

    /// No journal (no crash consistency).
    pub fn nojournal() -> Self {
        JournalConfig { name: "nojournal".into(), kind: JournalKind::None, ..Self::jbd2() }
    }

    /// Names of every preset.
    pub fn preset_names() -> &'static [&'static str] {
        &["jbd2", "nojournal"]
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "jbd2" => Some(Self::jbd2()),
            "nojournal" => Some(Self::nojournal()),
            _ => None,
        }
    }
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self::jbd2()
    }
}
