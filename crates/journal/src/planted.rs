//! Planted bugs, for the crash harness' self-tests: each one breaks crash consistency on
//! purpose, so a harness that misses it is itself broken. They exist only in builds with the
//! `planted-bugs` cargo feature; without it [`JournalConfig`] has no field for them and every
//! check below is the constant `false`, so release builds carry neither the setting nor the
//! branches.

use crate::config::JournalConfig;

/// The journal's planted bugs (all off by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlantedBugs {
    /// Do not flush before writing the commit block.
    pub skip_preflush: bool,
    /// Write the commit block before the logged blocks.
    pub commit_before_data: bool,
    /// Do not write revoke records.
    pub drop_revokes: bool,
    /// Per-core journaling: write no chain marks into commit blocks.
    pub drop_marks: bool,
    /// Per-core journaling: checkpoint every transaction as soon as it is durable, writing
    /// home and releasing versions of transactions that are not yet valid.
    pub checkpoint_invalid: bool,
    /// Per-core journaling: release a log's transactions while another log still holds an
    /// older version of one of their blocks (recovery replays it over the newer one home).
    pub release_past_older: bool,
    /// Single-I/O commit: hand each transaction to the flush thread without waiting for the
    /// previous one to be durable and without a barrier, so transaction n+1's write may
    /// persist while n's is torn.
    pub single_io_overlap: bool,
    /// Ordered-data checksums: write a block home in place while the last transaction's
    /// sums still cover it (no logged rewrite, no confirmation first), so a crash before the
    /// next commit makes recovery drop that acknowledged transaction.
    pub unconfirmed_rewrite: bool,
}

/// The bugs planted in `c` (none without the `planted-bugs` feature).
#[inline(always)]
pub(crate) fn bugs(c: &JournalConfig) -> PlantedBugs {
    #[cfg(feature = "planted-bugs")]
    {
        c.bugs
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = c;
        PlantedBugs {
            skip_preflush: false,
            commit_before_data: false,
            drop_revokes: false,
            drop_marks: false,
            checkpoint_invalid: false,
            release_past_older: false,
            single_io_overlap: false,
            unconfirmed_rewrite: false,
        }
    }
}
