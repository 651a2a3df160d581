//! Lock ranks, checked in debug builds: a small relative of the kernel's lockdep. Every lock
//! of the journal and of the file system has a [`Rank`]; a thread may take a lock only if
//! every lock it already holds ranks strictly lower (or the same, for the ranks whose locks
//! are taken several at a time in a documented order of their own, such as inode locks in
//! inode-number order). A violation panics at once, naming both locks, so the written order
//! (the crate documentation) cannot drift from the code: the debug test suite runs every
//! path with the check on.
//!
//! Release builds carry none of it: [`RankedMutex`] is then a plain `parking_lot::Mutex`
//! with a rank beside it, and a guard holds nothing more than the mutex guard.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult};

use crate::lock_stat::{WaitCv, contended};
use std::panic::Location;

/// Where a lock stands in the order, outermost first. A thread holding a lock of one rank
/// may take locks of higher ranks only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Rank {
    /// File system: cross-directory renames.
    FsRename = 5,
    /// File system: one fsync of an inode at a time (iJournaling), taken before its lock.
    FsFsync = 8,
    /// File system: an inode's lock (several at once, in the order `cjfs_fs` documents).
    FsInode = 10,
    /// File system: one shard of the inode cache.
    FsInodeCache = 14,
    /// File system: a quota file (`cjfs_fs`'s quota), one at a time, inside a transaction.
    FsQuota = 16,
    /// File system: orphan list edits.
    FsOrphan = 18,
    /// File system: a group's allocator state, one group at a time.
    FsGroup = 20,
    /// File system: the in-memory superblock.
    FsSuperblock = 22,
    /// Journal: a commit in progress (commit thread or an inline committer).
    CommitLock = 30,
    /// Journal: one checkpoint at a time.
    CheckpointLock = 31,
    /// Journal: from taking live images of data buffers until their writes are submitted.
    HomeWriteLock = 32,
    /// Buffer cache: one shard of the block-number index.
    CacheShard = 35,
    /// Buffer: its journal bookkeeping (`Buffer::jstate`), one buffer at a time.
    BufferJState = 40,
    /// Transaction: its buffer, ordered-data and revoke lists.
    TxLists = 41,
    /// Journal: superblock writes.
    SbWrite = 50,
    /// Journal: log head and tail.
    Log = 51,
    /// Journal: the flush thread's queue.
    FlushQueue = 52,
    /// Journal: the journal state (JBD2's `j_state_lock`).
    State = 53,
    /// File system: a directory's name map (written under its inode lock; nothing is taken
    /// under it).
    FsNames = 58,
    /// Leaves: nothing is taken under them (`updates_lock`, `checkpoint_list`, a
    /// transaction's `done`, the shadow pool, the journal's thread handles).
    Leaf = 60,
}

impl Rank {
    /// Every rank, outermost first.
    pub const ALL: [Rank; 19] = [
        Rank::FsRename,
        Rank::FsFsync,
        Rank::FsInode,
        Rank::FsInodeCache,
        Rank::FsOrphan,
        Rank::FsGroup,
        Rank::FsSuperblock,
        Rank::CommitLock,
        Rank::CheckpointLock,
        Rank::HomeWriteLock,
        Rank::CacheShard,
        Rank::BufferJState,
        Rank::TxLists,
        Rank::SbWrite,
        Rank::Log,
        Rank::FlushQueue,
        Rank::State,
        Rank::FsNames,
        Rank::Leaf,
    ];

    /// Whether several locks of this rank may be held at once (their own order is the
    /// caller's rule: inode numbers, group numbers).
    pub fn repeatable(self) -> bool {
        matches!(self, Rank::FsInode)
    }
}

#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;

    use super::Rank;

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    /// Check that `rank` may be taken now (unless `trying`: a try-lock cannot deadlock, so
    /// it only records), and record it as held.
    pub fn enter(rank: Rank, trying: bool) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if trying {
                h.push(rank);
                return;
            }
            if let Some(&worst) = h.iter().filter(|&&r| r > rank || (r == rank && !rank.repeatable())).max() {
                let held = h.clone();
                drop(h);
                panic!("lock order violated: taking {rank:?} while holding {worst:?} (held: {held:?})");
            }
            h.push(rank);
        });
    }

    /// Record that one lock of `rank` was released (guards need not drop in LIFO order).
    pub fn leave(rank: Rank) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&r| r == rank) {
                h.remove(i);
            }
        });
    }

    /// Ranks held by this thread, outermost first.
    #[cfg(test)]
    pub fn held() -> Vec<Rank> {
        HELD.with(|h| h.borrow().clone())
    }
}

/// Proof that a rank was entered; leaving it when dropped.
#[derive(Debug)]
struct Token {
    #[cfg(debug_assertions)]
    rank: Rank,
}

impl Token {
    #[inline(always)]
    fn enter(rank: Rank) -> Token {
        Token::record(rank, false)
    }

    /// For a try-lock: recorded as held, not checked (it cannot wait, so cannot deadlock).
    #[inline(always)]
    fn trying(rank: Rank) -> Token {
        Token::record(rank, true)
    }

    #[inline(always)]
    fn record(rank: Rank, trying: bool) -> Token {
        #[cfg(debug_assertions)]
        {
            held::enter(rank, trying);
            Token { rank }
        }
        #[cfg(not(debug_assertions))]
        {
            let _ = (rank, trying);
            Token {}
        }
    }
}

impl Drop for Token {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        held::leave(self.rank);
    }
}

/// Take a lock: `try_take` first; when it fails the lock is contended, and the blocking
/// `take` is timed for `lock_stat` (nothing is measured on the fast path).
/// The taker's call site (`#[track_caller]` through `lock`/`read`/`write`) is recorded with the
/// wait, so the tables can say which path queues on a lock.
#[inline]
#[track_caller]
fn acquire<G>(rank: Rank, try_take: impl FnOnce() -> Option<G>, take: impl FnOnce() -> G) -> G {
    match try_take() {
        Some(g) => g,
        None => {
            let site = Location::caller();
            let t0 = Instant::now();
            let g = take();
            contended(rank, site, t0.elapsed());
            g
        }
    }
}

/// A mutex with a rank.
#[derive(Debug)]
pub struct RankedMutex<T> {
    rank: Rank,
    inner: Mutex<T>,
}

impl<T> RankedMutex<T> {
    /// A mutex of `rank` holding `value`.
    pub const fn new(rank: Rank, value: T) -> Self {
        RankedMutex { rank, inner: Mutex::new(value) }
    }

    /// Take the lock (debug builds check the order first, so a violation panics instead of
    /// perhaps deadlocking).
    #[inline]
    #[track_caller]
    pub fn lock(&self) -> RankedGuard<'_, T> {
        let token = Token::enter(self.rank);
        let guard = acquire(self.rank, || self.inner.try_lock(), || self.inner.lock());
        RankedGuard { guard, _token: token }
    }

    /// Take the lock if it is free (not checked against the order: it never waits).
    #[inline]
    pub fn try_lock(&self) -> Option<RankedGuard<'_, T>> {
        let token = Token::trying(self.rank);
        self.inner.try_lock().map(|guard| RankedGuard { guard, _token: token })
    }
}

/// A held [`RankedMutex`].
pub struct RankedGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    _token: Token,
}

impl<T> RankedGuard<'_, T> {
    /// Wait on `cv`, which must be paired with this mutex.
    #[inline]
    pub fn wait(&mut self, cv: &WaitCv) {
        cv.wait(&mut self.guard);
    }

    /// Wait on `cv` for at most `timeout`.
    #[inline]
    pub fn wait_for(&mut self, cv: &WaitCv, timeout: Duration) -> WaitTimeoutResult {
        cv.wait_for(&mut self.guard, timeout)
    }

    /// Wait on `cv` until `deadline`.
    #[inline]
    pub fn wait_until(&mut self, cv: &WaitCv, deadline: Instant) -> WaitTimeoutResult {
        cv.wait_until(&mut self.guard, deadline)
    }
}

impl<T> Deref for RankedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for RankedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// A reader-writer lock with a rank (readers and writers alike follow the order).
#[derive(Debug)]
pub struct RankedRwLock<T> {
    rank: Rank,
    inner: RwLock<T>,
}

impl<T> RankedRwLock<T> {
    /// A lock of `rank` holding `value`.
    pub const fn new(rank: Rank, value: T) -> Self {
        RankedRwLock { rank, inner: RwLock::new(value) }
    }

    /// Take it shared.
    #[inline]
    #[track_caller]
    pub fn read(&self) -> RankedRead<'_, T> {
        let token = Token::enter(self.rank);
        let guard = acquire(self.rank, || self.inner.try_read(), || self.inner.read());
        RankedRead { guard, _token: token }
    }

    /// Take it exclusive.
    #[inline]
    #[track_caller]
    pub fn write(&self) -> RankedWrite<'_, T> {
        let token = Token::enter(self.rank);
        let guard = acquire(self.rank, || self.inner.try_write(), || self.inner.write());
        RankedWrite { guard, _token: token }
    }

    /// Take it shared if no writer holds it.
    #[inline]
    pub fn try_read(&self) -> Option<RankedRead<'_, T>> {
        let token = Token::trying(self.rank);
        self.inner.try_read().map(|guard| RankedRead { guard, _token: token })
    }
}

/// A shared hold of a [`RankedRwLock`].
pub struct RankedRead<'a, T> {
    guard: RwLockReadGuard<'a, T>,
    _token: Token,
}

/// An exclusive hold of a [`RankedRwLock`].
pub struct RankedWrite<'a, T> {
    guard: RwLockWriteGuard<'a, T>,
    _token: Token,
}

impl<T> Deref for RankedRead<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> Deref for RankedWrite<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for RankedWrite<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_in_rank_order_pass_and_are_released_in_any_order() {
        let a = RankedMutex::new(Rank::CommitLock, 1);
        let b = RankedMutex::new(Rank::Log, 2);
        let c = RankedMutex::new(Rank::State, 3);
        let ga = a.lock();
        let gb = b.lock();
        let gc = c.lock();
        assert_eq!(*ga + *gb + *gc, 6);
        drop(gb);
        drop(ga);
        drop(gc);
        let _gb = b.lock();
        let _ga2 = RankedMutex::new(Rank::State, 0);
        let _g = _ga2.lock();
    }

    #[test]
    fn repeatable_ranks_may_be_held_several_at_a_time() {
        let i1 = RankedMutex::new(Rank::FsInode, ());
        let i2 = RankedMutex::new(Rank::FsInode, ());
        let _g1 = i1.lock();
        let _g2 = i2.lock();
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "lock order violated: taking CommitLock while holding State")]
    fn taking_two_locks_out_of_order_fails() {
        let state = RankedMutex::new(Rank::State, ());
        let commit = RankedMutex::new(Rank::CommitLock, ());
        let _s = state.lock();
        let _c = commit.lock();
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "taking Log while holding Log")]
    fn two_locks_of_a_rank_that_is_not_repeatable_fail() {
        let a = RankedMutex::new(Rank::Log, ());
        let b = RankedMutex::new(Rank::Log, ());
        let _a = a.lock();
        let _b = b.lock();
    }

    #[cfg(debug_assertions)]
    #[test]
    fn a_failed_check_leaves_the_thread_state_clean() {
        let state = RankedMutex::new(Rank::State, ());
        let commit = RankedMutex::new(Rank::CommitLock, ());
        let (refused, held_after) = std::thread::spawn(move || {
            let _s = state.lock();
            let refused =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(commit.lock()))).is_err();
            (refused, held::held())
        })
        .join()
        .unwrap();
        assert!(refused);
        assert_eq!(held_after, vec![Rank::State], "the refused lock is not recorded as held");
    }
}
