//! File-system-independent journal for cjfs.
//!
//! Like JBD2, the journal sees block numbers and buffers, never inodes or directories.
//! On disk it is JBD2 (v2 superblock, descriptor blocks with csum-v3 tags, commit blocks with
//! timestamps, revoke blocks, escaping of the magic number), so `e2fsck` and the kernel can
//! replay what it writes.
//!
//! # Files
//!
//! The journal is a set of logs sharing one buffer cache; each log is the JBD2 state machine,
//! a stage per file, with each technique in the file named after it:
//!
//! | file | owns |
//! |---|---|
//! | `set.rs` | the shared set: device, buffer cache, home-write order, the fdatasync data step, abort fan-out, statistics; the public [`Journal`] and admission of a handle to a log |
//! | `log_core.rs` | one log's core: its running and committing transactions, handle start, commit requests, waiting for durability, shutdown |
//! | `handle.rs` | a handle: write/create access, dirty data, revoke, stop |
//! | `transaction.rs` | a transaction, its lists and its state machine |
//! | `buffer.rs` | the buffer cache and each buffer's journal state |
//! | `commit.rs` | the commit thread: lock-up, versions, log and ordered-data writes |
//! | `flush.rs` | the flush step: completion, flushes/barriers, commit records, durability |
//! | `checkpoint.rs` | writing committed blocks home and moving the log tail (with several logs: the coherence checkpoint) |
//! | `log.rs` | the log's superblock position over the ring |
//! | `ring.rs` | the circular log itself (arithmetic and span allocation), shared with recovery |
//! | `area.rs` | where a log lives on the device |
//! | `recovery.rs` | scan, decide, replay (JBD2's recovery) |
//! | `external_tx.rs` | a transaction the file system's own recovery steps build (i-transactions, fast commits), committed to a clean log and replayed |
//! | `superblock.rs`, `descriptor.rs`, `commit_block.rs`, `revoke_block.rs`, `checksum.rs`, `writer.rs` | the JBD2 on-disk format |
//! | `config.rs` | every setting and the named presets; `device_choice.rs`: the `auto` preset |
//! | `shadow.rs` | multi-version shadow paging (CJFS §4.2) |
//! | `single_io.rs` | the single-I/O commit of journaling of journal (FAST'14 §2.1): a transaction as one write and one flush, with the v1 checksum and async-commit features |
//! | `ordered_sums.rs` | ordered-data checksums (OptFS's transactional checksums, SOSP'13): a single-I/O commit sums the ordered data it exposes in its commit block and sends both under one flush; recovery checks the last transaction |
//! | `unjournal.rs` | a file leaving data journaling by revoke: its pending checkpoint images become the switch's ordered writes, its blocks revoked, the log held until the switch is durable (instead of emptying the journal) |
//! | `per_core.rs` | per-core journaling (Z-Journal): admission, chain marks, stamps, validity |
//! | `order_graph.rs` | recovery of several logs by order graph (Z-Journal §3.4) |
//! | `coalescing.rs` | lock-up with opportunistic coalescing and commit pacing (CJFS §4.3) |
//! | `compound_flush.rs` | compound flush (CJFS §4.4), and flushes shared across logs (`SharedFlush`) |
//! | `polling.rs` | polling completion waits: spin a device-adapted budget, then park (XFS paper) |
//! | `work_queue.rs` | per-core work queues: per-core commit-request slots and a lock-free flush hand-off (XFS paper) |
//! | `stats.rs` | statistics; `lock_rank.rs`: the lock order, checked; `lock_stat.rs`: lock-wait accounting (lockstat); `planted.rs`: test-only bugs |
//!
//! # Lock order
//!
//! Outer to inner; a thread holding a lock may only take locks below it. The ranks are
//! [`lock_rank::Rank`], and debug builds check every acquisition against them (a violation
//! panics naming both locks), so this list is the code's, not a wish:
//!
//! 1. file system locks (rename lock, inode locks, orphan lock, group locks, superblock;
//!    see `cjfs_fs`) — inode locks are taken *before* a handle starts;
//! 2. `LogCore::commit_lock` → `checkpoint_lock` → `Shared::home_write_lock` (a commit may
//!    checkpoint synchronously for log space; a checkpoint takes buffers' `jstate`; the
//!    commit path and fdatasync take data buffers' images under `home_write_lock`);
//! 3. `BufferCache` shard (one at a time);
//! 4. `Buffer::jstate` (one buffer at a time);
//! 5. `Transaction::lists`;
//! 6. `sb_write` → `log` → `flush_queue` → `state` (all of one log: no thread holds two
//!    logs' locks of one rank; abort takes each log's `state` in turn, holding nothing);
//! 7. leaves: `updates_lock` (a writer pins another log's transaction under that log's
//!    `updates_lock` while holding the buffer's `jstate`), `checkpoint_list`, `summed`, a transaction's
//!    `marks`, `per_core::Chains::pending`, `compound_flush::SharedFlush`, the shadow pool, `Shared::aborted`,
//!    `Shared::barrier_lock` (taken holding nothing of the journal). (A
//!    `polling::Event` — under a transaction's `done` and `changed` and the work queues'
//!    doorbells — has no lock of its own: its waiters park keyed by its address.)
//!
//! `Buffer::data` (the live image, a `RwLock`) is outside the ranking: it is never held
//! while calling into the journal for writing, and the commit path takes it for reading
//! under `jstate`.
//!
//! Each condition variable pairs with one mutex: `commit_cv`, `locked_cv`, `done_cv` and
//! `checkpoint_cv` with `state`; `updates_cv` with `updates_lock`; `barrier_cv` with `barrier_lock`; `flush_cv` with
//! `flush_queue` (with shared dispatch); a buffer's condvar
//! with its `jstate`.
//!
//! No lock is held across device I/O except `checkpoint_lock`, `sb_write`,
//! `home_write_lock` (across submission only) and a buffer's `data` while it is read in.
//!
//! The hot paths take no journal-wide lock: a handle joins the running transaction through
//! `LogCore::running_fast` and the transaction's atomics (the lock-up's store of
//! Locked and a starter's increment of `updates` are sequentially consistent, so one of the
//! two always sees the other), and a caller waiting for durability sleeps on its
//! transaction's `done`. A user-space lock taken by every handle turns into a convoy as soon
//! as a holder is preempted, which on a machine with fewer cores than threads is constant.

pub mod area;
pub mod buffer;
mod checkpoint;
pub mod checksum;
mod coalescing;
mod commit;
pub mod commit_block;
mod compound_flush;
pub mod config;
pub mod descriptor;
pub mod device_choice;
pub mod error;
pub mod external_tx;
mod flush;
pub mod handle;
pub mod lock_rank;
pub mod lock_stat;
mod log;
mod log_core;
pub mod order_graph;
pub mod ordered_sums;
pub mod per_core;
mod planted;
pub mod polling;
pub mod recovery;
pub mod revoke_block;
pub mod ring;
mod set;
pub mod shadow;
pub mod single_io;
pub mod stats;
pub mod superblock;
pub mod transaction;
mod unjournal;
pub mod work_queue;
mod writer;

pub use area::{AreaExtent, JournalArea};
pub use buffer::{Buffer, BufferCache, Committed, JState, Tid};
pub use cjfs_blockdev::{LogId, TxId};
pub use compound_flush::LogFlush;
pub use config::{CheckpointScope, CommitMode, IAreas, IData, IForm, IJournal, JournalConfig, JournalKind};
pub use error::{JResult, JournalError};
pub use handle::Handle;
pub use per_core::Logs;
#[cfg(feature = "planted-bugs")]
pub use planted::PlantedBugs;
pub use set::{DataWritten, Journal};
pub use stats::StatsSnapshot;
pub use transaction::TxState;
