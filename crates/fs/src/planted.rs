//! Planted file system bugs, for the crash harness' self-tests: each one breaks crash
//! consistency on purpose. They exist only in builds with the `planted-bugs` cargo feature
//! (which also plants the journal's, `cjfs_journal::PlantedBugs`); without it
//! [`MountOptions`] has no field for them and every check is the constant `false`.

use crate::types::MountOptions;

/// The file system's planted bugs (all off by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsBugs {
    /// A write that extends the file does not journal the new size: the inode is stored
    /// with its old `i_size` (the in-memory size is right, the durable one is stale).
    pub skip_size_update_journal: bool,
    /// iJournaling: an fsync leaves out the records of the new directories on the file's
    /// path, so recovery finds the file's entry in a directory it never made.
    pub skip_ancestor_record: bool,
    /// Blocks freed from a data-journaled file are not revoked ("revoke switched off"): a
    /// logged copy of one may be replayed over the block's next owner.
    pub no_data_revoke: bool,
    /// A file leaving data journaling by revoke (`leave=revoke`) hands its checkpoint images
    /// to ordered writes but revokes nothing: a logged copy may be replayed over data the
    /// file wrote in place and synced after the switch.
    pub leave_without_revoke: bool,
    /// A file that left data journaling rewrites a block in place while the block still has
    /// an image in the log (`adaptive::before_in_place` journals nothing): recovery or the
    /// checkpoint may put the older image over the synced rewrite.
    pub rewrite_in_place: bool,
    /// Directory operations in a `dirsync` mount or a `chattr +D`/`+S` directory return
    /// without committing (`dir_ops_durable` does nothing): they may be lost after returning.
    pub no_dirsync: bool,
}

/// The bugs planted in `o` (none without the `planted-bugs` feature).
#[inline(always)]
pub(crate) fn bugs(o: &MountOptions) -> FsBugs {
    #[cfg(feature = "planted-bugs")]
    {
        o.bugs
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = o;
        FsBugs {
            skip_size_update_journal: false,
            skip_ancestor_record: false,
            no_data_revoke: false,
            leave_without_revoke: false,
            rewrite_in_place: false,
            no_dirsync: false,
        }
    }
}
