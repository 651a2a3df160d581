//! File-system-independent journal for cjfs.
//!
//! Like JBD2, the journal sees block numbers and buffers, never inodes or directories.
//! On disk it is JBD2 (v2 superblock, descriptor blocks with csum-v3 tags, commit blocks with
//! timestamps, revoke blocks, escaping of the magic number), so `e2fsck` and the kernel can
//! replay what it writes.
//!
//! # Lock order
//!
//! Outer to inner; a thread holding a lock may only take locks below it:
//!
//! 1. file system locks (inode locks, in inode-number order) — taken *before* a handle starts;
//! 2. a running handle (holding one blocks the commit of its transaction);
//! 3. file system allocator / group locks;
//! 4. `Buffer::jstate` (one buffer at a time);
//! 5. `Transaction::lists`;
//! 6. `JournalInner::commit_lock` → `checkpoint_lock` → `sb_write` → `log` →
//!    `flush_queue` → `state` (`updates_lock`, `checkpoint_list` and `Transaction::done`
//!    are leaves);
//! 7. `Buffer::data` (the live image; never held while calling into the journal for
//!    writing, the commit path takes it for reading under `jstate`).
//!
//! `home_write_lock` is held from taking data buffers' live images (each under its `jstate`,
//! then `data` for reading) until their writes are submitted; the commit path takes it
//! under `commit_lock`, fdatasync with no journal lock held.
//!
//! No lock is held across device I/O except `checkpoint_lock`, `sb_write`,
//! `home_write_lock` (across submission only) and a buffer's `data` while it is read in.
//!
//! The hot paths take no journal-wide lock: a handle joins the running transaction through
//! `JournalInner::running_fast` and the transaction's atomics (the lock-up's store of
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
mod flush;
pub mod handle;
pub mod journal;
mod log;
mod planted;
pub mod recovery;
pub mod revoke_block;
pub mod ring;
pub mod shadow;
pub mod stats;
pub mod superblock;
pub mod transaction;
mod writer;

pub use area::{AreaExtent, JournalArea};
pub use buffer::{Buffer, BufferCache, JState, Tid};
pub use config::{JournalConfig, JournalKind};
#[cfg(feature = "planted-bugs")]
pub use planted::PlantedBugs;
pub use error::{JResult, JournalError};
pub use handle::Handle;
pub use journal::Journal;
pub use stats::StatsSnapshot;
pub use transaction::TxState;
