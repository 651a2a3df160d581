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

/// How many ijournal areas iJournaling writes its fsync records to (the technique lives in
/// the file system, `cjfs_fs::ijournal`; the journal only carries the setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IAreas {
    /// iJournaling off: fsync commits the running transaction.
    Off,
    /// One area per core (the paper's per-core areas).
    PerCore,
    /// This many areas (1 = one shared area, the paper's Fig. 9 comparison).
    Count(u16),
}

impl IAreas {
    /// Areas wanted (0 when off).
    pub fn wanted(self) -> usize {
        match self {
            IAreas::Off => 0,
            IAreas::PerCore => crate::per_core::cores(),
            IAreas::Count(n) => usize::from(n),
        }
    }
}

impl std::str::FromStr for IAreas {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(IAreas::Off),
            "cores" => Ok(IAreas::PerCore),
            n => match n.parse::<u16>() {
                Ok(0) => Ok(IAreas::Off),
                Ok(k) if usize::from(k) <= crate::superblock::MAX_LOG_AREAS => Ok(IAreas::Count(k)),
                _ => Err(format!(
                    "ijournal={s}: expected off, cores or a number of areas up to {}",
                    crate::superblock::MAX_LOG_AREAS
                )),
            },
        }
    }
}

/// The form of an i-transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IForm {
    /// A header block whose checksum covers itself and, through per-tag checksums, every
    /// extent block after it: no commit block, so a simple fsync writes one block with one
    /// FUA write.
    Single,
    /// The paper's form: header and extent blocks, a flush, then a commit block (FUA) whose
    /// checksum covers them all (two blocks for a simple fsync).
    Commit,
}

/// How an fsync served by an i-transaction makes the file's data durable before its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IData {
    /// Each fsync alone: FUA writes when the data forms a few requests, else plain writes
    /// and a flush of its own.
    Own,
    /// While other fsyncs are writing to the same area, data that would go FUA goes as
    /// plain writes made durable by one flush per batch of records, issued by the batch's
    /// leader before the records' final blocks and shared by every fsync in the batch;
    /// scattered data and a lone fsync as [`IData::Own`] (a flush drains other files' cached
    /// writes too, a FUA write only its own blocks).
    Grouped,
}

/// iJournaling's settings (one setting of [`JournalConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IJournal {
    /// How many ijournal areas (off: iJournaling is not used).
    pub areas: IAreas,
    /// Record form.
    pub form: IForm,
    /// Blocks of each area `cjfs mkfs` (and the lab) make for this setting.
    pub area_blocks: u32,
    /// How a served fsync's data is made durable.
    pub data: IData,
}

impl IJournal {
    /// iJournaling off.
    pub const fn off() -> Self {
        IJournal { areas: IAreas::Off, form: IForm::Single, area_blocks: 1024, data: IData::Grouped }
    }

    /// Whether fsync writes i-transactions.
    pub fn on(&self) -> bool {
        self.areas != IAreas::Off
    }
}

/// How a transaction reaches the log (see `single_io.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// JBD2's two-step commit: log blocks, an ordering step (flush, or a cache barrier),
    /// then the commit block and a flush. Any JBD2 checksum feature (or none) replays it.
    TwoStep,
    /// Journaling of journal's single-I/O commit (FAST'14 §2.1): the whole transaction —
    /// revoke blocks, descriptors, escaped blocks and the commit block — as one contiguous
    /// write (two where the log wraps), then one flush. A torn write is told from a whole
    /// one by a checksum over the transaction, so the journal carries JBD2's v1 transaction
    /// checksum with `ASYNC_COMMIT` while it is open (see `single_io.rs` for what that means
    /// to the kernel and e2fsck). A transaction with ordered data pays a flush before its
    /// single write (or, on a device with one, a cache barrier).
    SingleIo,
}

/// What a checkpoint made for log space writes home (see `checkpoint.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointScope {
    /// Every durable transaction: the log is emptied as far as it can be.
    #[default]
    All,
    /// The oldest durable transactions only, until the log is filled to half the
    /// high-water mark (JBD2's way: a checkpoint frees the space it is asked for). The
    /// newest transactions stay in the log, so a block they hold that is revoked (a
    /// short-lived file deleted) or journaled again soon is never written home. A checkpoint
    /// asked for by the commit interval, an unmount or a caller still empties the log.
    Oldest,
}

impl CheckpointScope {
    /// The setting's name (`all`, `oldest`).
    pub fn name(self) -> &'static str {
        match self {
            CheckpointScope::All => "all",
            CheckpointScope::Oldest => "oldest",
        }
    }
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
    /// Use dual-thread commit only on a device with a cache barrier; without one the commit
    /// is serial. There every group must pay flush → commit blocks → flush anyway, so a second
    /// thread adds a handoff and a flush that also writes back the next transaction's log
    /// pages, and gains no overlap (varmail-shared at 32 threads on the file device: 0.90 ×
    /// `jbd2` dual, 1.19 × serial). The other techniques stay on.
    pub dual_thread_barrier_only: bool,
    /// Versions of one buffer that may be in flight at once (1 = JBD2's single frozen copy).
    pub max_versions: u32,
    /// Multi-version shadow paging (CJFS §4.2): the commit takes a copy of every buffer, so a
    /// writer never waits for a buffer's versions in flight; a transaction that would need a
    /// version beyond `max_versions` conflicts at commit time (resolved by coalescing, or by
    /// waiting in the lock-up). When false the committing transaction owns the page until
    /// the version is released, and a writer waits for it (JBD2's shadow buffer wait, the
    /// page lock of ext4 and BarrierFS), which is what the paper counts as a conflict.
    pub multi_version: bool,
    /// Release a buffer's version when its log write completes (JBD2's shadow buffer) rather
    /// than when its transaction is durable.
    pub release_on_log_write: bool,
    /// Opportunistic coalescing (CJFS Algorithm 1): a locked transaction that conflicts with
    /// a committing one goes back to Running and keeps absorbing handles. When false the
    /// lock-up blocks until the conflict clears (BarrierFS, JBD2).
    pub coalescing: bool,
    /// Compound flush: most transactions made durable by one flush (1 = a flush per
    /// transaction). Later transactions already committing get a barrier instead of a flush.
    pub compound_flush: u32,
    /// Order log blocks before the commit block with a cache barrier (when the device has
    /// one) instead of a flush.
    pub use_barriers: bool,
    /// Shadow pages pre-allocated for versions (returned when no longer needed).
    pub shadow_pool: usize,
    /// Commit interval (the 5 s timer).
    pub commit_interval: Duration,
    /// Maximum blocks in one transaction; `None` = a quarter of the log, as JBD2.
    pub max_tx_blocks: Option<u32>,
    /// Ordered data blocks after which the running transaction is committed.
    pub max_ordered_blocks: u32,
    /// A commit writes its ordered data in windows of at most this many blocks, each after
    /// the one before completed (the kernel's block layer bounds a writer's requests in
    /// flight): other I/O waits behind one window, not behind the whole commit's data. Below
    /// this cap the window follows the device's measured speed (about 2 ms of writing).
    pub ordered_window_blocks: u32,
    /// Start background checkpointing when the log is this full (0..1).
    pub checkpoint_high_water: f64,
    /// What a checkpoint for log space writes home: every durable transaction, or only the
    /// oldest (journaling of journal's presets; see [`CheckpointScope`]).
    pub checkpoint_scope: CheckpointScope,
    /// Write csum-v3 tags and block checksums.
    pub csum_v3: bool,
    /// How a transaction is written: JBD2's two-step commit or one single I/O
    /// (journaling of journal, `single_io.rs`).
    pub commit: CommitMode,
    /// Ordered-data checksums (`ordered_sums.rs`): a single-I/O commit whose newly exposed
    /// ordered data would need a flush before its log write instead checksums that data in
    /// its commit block and sends both together under one flush; recovery checks the sums
    /// of the log's last transaction. Needs `commit = single_io`; sets the private
    /// `cjfs_ordered_sums` journal bit while open.
    pub ordered_sums: bool,
    /// Per-core journaling (Z-Journal): how many logs. With more than one, each handle joins
    /// its core's log, transactions of different logs touching one block are chained, and
    /// fsync commits every log (see `per_core.rs`). The image must have the extra log areas
    /// (`cjfs mkfs --log-area`); with fewer, the journal runs the logs it has. Z-Journal's
    /// proactive frozen copy is [`JournalConfig::multi_version`].
    pub logs: crate::per_core::Logs,
    /// With several logs, what fsync commits: every log's running transaction (Z-Journal's
    /// fsync, `true`: the file's updates may sit in any log), or only its own transaction
    /// and whatever that is chained to (`false`: exact, since a change to a block another
    /// log holds is chained to it; fewer commits, each flush shared by fewer fsyncs).
    pub fsync_all_logs: bool,
    /// With several logs, which log a handle joins: its core's (the paper) or its thread's.
    pub admission: crate::per_core::Admission,
    /// With several logs, how their flushes meet the device: one at a time, shared where
    /// they meet, or each log's own, concurrently (see [`crate::LogFlush`];
    /// `Auto` decides by the device when the journal opens).
    pub log_flush: crate::LogFlush,
    /// How fsync callers wait for durability: park at once, or spin a device-adapted budget
    /// first (polling waits, `crate::polling`).
    pub wait: crate::polling::WaitMode,
    /// How commit requests and committed transactions reach a log's commit and flush
    /// threads: the log's state lock and condition variables, or per-core request slots and
    /// a lock-free hand-off (per-core work queues, `crate::work_queue`).
    pub dispatch: crate::work_queue::Dispatch,
    /// iJournaling (ATC'17): fsync writes a file-level i-transaction to an ijournal area
    /// instead of committing the running transaction. The file system implements it; it
    /// needs one log (it orders records by the log's transaction ids).
    pub ijournal: IJournal,
    /// Planted bugs for the crash harness' self-tests (`planted-bugs` builds only).
    #[cfg(feature = "planted-bugs")]
    pub bugs: crate::planted::PlantedBugs,
    /// Choose the preset when the journal opens, from the device's capabilities (the `auto`
    /// preset, see [`crate::device_choice`]); the other technique settings here are then
    /// replaced by the chosen preset's.
    pub per_device: bool,
}

impl JournalConfig {
    /// JBD2 as in ext4: one running and one committing transaction, serial commit, one frozen
    /// copy per buffer, a cache flush before and a FUA-like flush after the commit block.
    pub fn jbd2() -> Self {
        JournalConfig {
            name: "jbd2".into(),
            kind: JournalKind::Jbd2,
            dual_thread: false,
            dual_thread_barrier_only: false,
            max_versions: 1,
            multi_version: false,
            release_on_log_write: true,
            coalescing: false,
            compound_flush: 1,
            use_barriers: false,
            shadow_pool: 0,
            commit_interval: Duration::from_secs(5),
            max_tx_blocks: None,
            max_ordered_blocks: 16384,
            ordered_window_blocks: 1024,
            checkpoint_high_water: 0.5,
            checkpoint_scope: CheckpointScope::All,
            csum_v3: true,
            commit: CommitMode::TwoStep,
            ordered_sums: false,
            wait: crate::polling::WaitMode::Condvar,
            dispatch: crate::work_queue::Dispatch::Shared,
            logs: crate::per_core::Logs::One,
            fsync_all_logs: true,
            admission: crate::per_core::Admission::Core,
            log_flush: crate::LogFlush::Auto,
            ijournal: IJournal::off(),
            #[cfg(feature = "planted-bugs")]
            bugs: crate::planted::PlantedBugs::default(),
            per_device: false,
        }
    }

    /// No journal (no crash consistency).
    pub fn nojournal() -> Self {
        // Nothing is logged, so a buffer being written home never blocks its writers.
        JournalConfig {
            name: "nojournal".into(),
            kind: JournalKind::None,
            max_versions: u32::MAX,
            ..Self::jbd2()
        }
    }

    /// BarrierFS-style: dual-thread commit, one shadow version per buffer held until its
    /// transaction is durable, non-preemptive lock-up, barrier-ordered commit block and one
    /// flush per transaction.
    pub fn barrierfs() -> Self {
        JournalConfig {
            name: "barrierfs".into(),
            dual_thread: true,
            max_versions: 1,
            release_on_log_write: false,
            use_barriers: true,
            shadow_pool: 1024,
            ..Self::jbd2()
        }
    }

    /// CJFS: dual-thread journaling, multi-version shadow paging (5 versions), opportunistic
    /// coalescing and compound flush (up to 16 transactions per flush), with polling waits
    /// (`wait = spin_park`, the XFS journaling paper's technique; `cjfs-condvar` keeps
    /// condvar waits).
    pub fn cjfs() -> Self {
        JournalConfig {
            name: "cjfs".into(),
            // Measured at or above condvar waits on every point since the per-site spin
            // score (0342d89): 1.04-1.10x at 32 threads on the RAM disk and Optane presets,
            // spin time 0 on SATA (docs/results/waits/).
            wait: crate::polling::WaitMode::SpinPark,
            dual_thread: true,
            dual_thread_barrier_only: true,
            max_versions: 5,
            multi_version: true,
            release_on_log_write: false,
            coalescing: true,
            compound_flush: 16,
            use_barriers: true,
            shadow_pool: 4096,
            ..Self::jbd2()
        }
    }

    /// Z-Journal: a log per core (each a JBD2 stack: serial commit), transactions of different
    /// logs chained where they share a block, and the proactive frozen copy (every
    /// committing buffer is a copy, so a writer never waits; `multi_version`).
    ///
    /// A handle joins its thread's log rather than its core's (the paper, `+admit=core`):
    /// threads that migrate between cores otherwise split one file's blocks between logs,
    /// and every such block chains them (FxMark DWSL at 16 threads on two cores: 1.14
    /// bi-directional marks per commit and 0.45x `jbd2` by core, none and 1.17x by thread).
    pub fn zjournal() -> Self {
        JournalConfig {
            name: "zjournal".into(),
            logs: crate::per_core::Logs::PerCore,
            admission: crate::per_core::Admission::Thread,
            multi_version: true,
            max_versions: 64,
            shadow_pool: 4096,
            ..Self::jbd2()
        }
    }

    /// Journaling of journal (FAST'14): JBD2 with the single-I/O commit. Data-journaled
    /// files (a `data=journal` mount, or `chattr +j`) then cost one write and one flush per
    /// fsync; which files journal their data stays the mount's and the files' choice (the
    /// `adaptive` preset adds the file system's automatic per-file choice).
    pub fn joj() -> Self {
        // Checkpoints for space write only the oldest transactions: the paper's cost model
        // (and `cjfs_fs`'s adaptive policy) takes a short-lived data-journaled file's blocks
        // as revoked before any checkpoint writes them, which one that empties the whole log
        // breaks for the newest (a rollback journal synced and not yet deleted).
        JournalConfig {
            name: "joj".into(),
            commit: CommitMode::SingleIo,
            checkpoint_scope: CheckpointScope::Oldest,
            ..Self::jbd2()
        }
    }

    /// Every preset, including the technique ablations; each is crash tested and may be
    /// named anywhere (bench, crashtest, mount). `auto` resolves to one of the others per
    /// device.
    pub fn preset_names() -> &'static [&'static str] {
        &[
            "auto",
            "jbd2",
            "nojournal",
            "barrierfs",
            "cjfs",
            "cjfs-v1",
            "cjfs-v3",
            "cjfs-no-coalescing",
            "cjfs-no-compound",
            "cjfs-no-dual",
            "cjfs-condvar",
            "zjournal",
            "zjournal-no-pfc",
            "zjournal-no-bga",
            "zjournal-cjfs",
            "ijournal",
            "ijournal-shared",
            "ijournal-cjfs",
            "joj",
            "adaptive",
        ]
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Option<Self> {
        let named = |mut c: JournalConfig| {
            c.name = name.to_string();
            c
        };
        Some(match name {
            "auto" => Self::auto(),
            "jbd2" => Self::jbd2(),
            "nojournal" => Self::nojournal(),
            "barrierfs" => Self::barrierfs(),
            "cjfs" => Self::cjfs(),
            "cjfs-v1" => named(JournalConfig { max_versions: 1, ..Self::cjfs() }),
            "cjfs-v3" => named(JournalConfig { max_versions: 3, ..Self::cjfs() }),
            "cjfs-no-coalescing" => named(JournalConfig { coalescing: false, ..Self::cjfs() }),
            "cjfs-no-compound" => named(JournalConfig { compound_flush: 1, ..Self::cjfs() }),
            "cjfs-no-dual" => named(JournalConfig { dual_thread: false, ..Self::cjfs() }),
            // Journal-wide condvars woken with `notify_all` instead of polling waits.
            "cjfs-condvar" => {
                named(JournalConfig { wait: crate::polling::WaitMode::Condvar, ..Self::cjfs() })
            }
            "zjournal" => Self::zjournal(),
            // Without the proactive frozen copy: JBD2's single frozen copy per log, a writer
            // waits for a version in flight.
            "zjournal-no-pfc" => named(JournalConfig {
                multi_version: false,
                max_versions: 1,
                shadow_pool: 0,
                ..Self::zjournal()
            }),
            // Core-aware block-group allocation is the file system's (`cjfs_fs::preset`).
            "zjournal-no-bga" => named(Self::zjournal()),
            // CJFS's commit pipeline in every log: the combination no paper measured.
            "zjournal-cjfs" => named(JournalConfig {
                logs: crate::per_core::Logs::PerCore,
                admission: crate::per_core::Admission::Thread,
                // The per-core family keeps condvar waits: each log's own state lock already
                // halves the contention, and polling measured no gain with two logs
                // (docs/results/waits/, zjournal at 244fc59 and 03c1585).
                wait: crate::polling::WaitMode::Condvar,
                ..Self::cjfs()
            }),
            // iJournaling over JBD2's commits: fsync writes to the area of its core.
            "ijournal" => named(JournalConfig {
                ijournal: IJournal { areas: IAreas::PerCore, ..IJournal::off() },
                ..Self::jbd2()
            }),
            // One ijournal area shared by every core (the paper's Fig. 9 comparison).
            "ijournal-shared" => named(JournalConfig {
                ijournal: IJournal { areas: IAreas::Count(1), ..IJournal::off() },
                ..Self::jbd2()
            }),
            // iJournaling with CJFS's commit pipeline for the normal commits.
            "ijournal-cjfs" => named(JournalConfig {
                ijournal: IJournal { areas: IAreas::PerCore, ..IJournal::off() },
                // Polling waits were measured on the cjfs pipeline alone, not with
                // iJournaling's fsync path, so this combination keeps condvar waits.
                wait: crate::polling::WaitMode::Condvar,
                ..Self::cjfs()
            }),
            "joj" => Self::joj(),
            // The automatic per-file data mode is the file system's (`cjfs_fs::preset`).
            // With ordered-data checksums an ordered file's growth costs one flush, so the
            // policy journals only short-lived files (SQLite matrix: 24 of 24 cells within
            // 6 % of no journal with them, 16 without; `docs/results/joj/`).
            "adaptive" => named(JournalConfig { ordered_sums: true, ..Self::joj() }),
            _ => return None,
        })
    }
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self::jbd2()
    }
}
