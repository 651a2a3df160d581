//! When reading a file or listing a directory moves its access time: the mount's
//! `noatime`, `relatime` (the kernel's default) or `strictatime`, and the rule of the kernel's
//! `relatime_need_update`.
//!
//! The kernel leaves a FUSE file system's access times to the daemon, which updates them
//! for the reads and listings that reach it ([`crate::Fs::touch_atime`]); the library's own
//! reads ([`crate::Fs::read`]) never move them, so what a benchmark measures in-process is
//! unchanged.

use crate::inode::InodeState;
use crate::ondisk::inode::{EXT4_IMMUTABLE_FL, EXT4_NOATIME_FL};
use crate::types::Timestamp;

/// How an access moves an inode's access time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeUpdate {
    /// Never (`noatime`, and `nodiratime` for directories).
    Never,
    /// Only when the access time is not after the last modification or change, or is a day
    /// old (`relatime`): a reader can still tell whether a file was read since it changed.
    #[default]
    Relative,
    /// On every access (`strictatime`).
    Always,
}

/// Seconds after which `relatime` moves an access time that is already newer than the
/// modification (the kernel's one day).
const RELATIME_SECS: i64 = 24 * 60 * 60;

/// Whether an access at `now` moves the access time of the inode in `st` under `how`.
/// Inodes marked `chattr +A` (no-atime) or immutable never change.
pub(crate) fn needs_update(how: AtimeUpdate, st: &InodeState, now: Timestamp) -> bool {
    if st.d.flags & (EXT4_NOATIME_FL | EXT4_IMMUTABLE_FL) != 0 {
        return false;
    }
    match how {
        AtimeUpdate::Never => false,
        AtimeUpdate::Always => st.d.atime != now,
        // An access time already at `now` stays (the kernel's `atime_needs_update`): with
        // the coarse clock a change and two reads often share one tick.
        AtimeUpdate::Relative => {
            (st.d.mtime >= st.d.atime
                || st.d.ctime >= st.d.atime
                || now.sec - st.d.atime.sec >= RELATIME_SECS)
                && st.d.atime != now
        }
    }
}
