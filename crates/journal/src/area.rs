//! The journal area: where the circular log lives on the device.
//!
//! An internal ext4 journal is a file (inode 8) whose blocks need not be contiguous, so the
//! log is addressed by *log block number* (0 = journal superblock) and mapped to device
//! blocks through the extents the file system hands over.

use cjfs_blockdev::{DevError, DevResult};

/// One contiguous run of the journal area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AreaExtent {
    /// First log block of this run.
    pub log_start: u64,
    /// First device block of this run.
    pub dev_start: u64,
    /// Number of blocks.
    pub len: u64,
}

/// Mapping from log block numbers to device blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalArea {
    extents: Vec<AreaExtent>,
    len: u64,
}

impl JournalArea {
    /// An area made of runs of device blocks `(dev_start, len)`, in log order.
    pub fn new(runs: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut extents = Vec::new();
        let mut log = 0;
        for (dev_start, len) in runs {
            if len == 0 {
                continue;
            }
            extents.push(AreaExtent { log_start: log, dev_start, len });
            log += len;
        }
        JournalArea { extents, len: log }
    }

    /// A contiguous area.
    pub fn contiguous(dev_start: u64, len: u64) -> Self {
        Self::new([(dev_start, len)])
    }

    /// Number of log blocks (including the superblock at log block 0).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if the area has no blocks.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runs of this area.
    pub fn extents(&self) -> &[AreaExtent] {
        &self.extents
    }

    /// The `len` blocks of this area from its block `first`, as an area of its own (an extra
    /// log inside the journal inode).
    pub fn slice(&self, first: u64, len: u64) -> DevResult<JournalArea> {
        if first.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(DevError::OutOfRange { block: first, count: len, num_blocks: self.len });
        }
        let mut runs = Vec::new();
        let (mut at, end) = (first, first + len);
        while at < end {
            let (dev, n) = self.map_run(at, end - at)?;
            runs.push((dev, n));
            at += n;
        }
        Ok(JournalArea::new(runs))
    }

    /// Device block of log block `lblk`.
    pub fn map(&self, lblk: u64) -> DevResult<u64> {
        let i = self.extents.partition_point(|e| e.log_start + e.len <= lblk);
        match self.extents.get(i) {
            Some(e) if lblk >= e.log_start => Ok(e.dev_start + (lblk - e.log_start)),
            _ => Err(DevError::OutOfRange { block: lblk, count: 1, num_blocks: self.len }),
        }
    }

    /// Largest run of device-contiguous blocks starting at log block `lblk`, capped at `max`:
    /// `(device block, count)`.
    pub fn map_run(&self, lblk: u64, max: u64) -> DevResult<(u64, u64)> {
        let i = self.extents.partition_point(|e| e.log_start + e.len <= lblk);
        match self.extents.get(i) {
            Some(e) if lblk >= e.log_start => {
                let off = lblk - e.log_start;
                Ok((e.dev_start + off, (e.len - off).min(max)))
            }
            _ => Err(DevError::OutOfRange { block: lblk, count: 1, num_blocks: self.len }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_across_runs() {
        let a = JournalArea::new([(100, 3), (500, 2)]);
        assert_eq!(a.len(), 5);
        assert_eq!(a.map(0).ok(), Some(100));
        assert_eq!(a.map(2).ok(), Some(102));
        assert_eq!(a.map(3).ok(), Some(500));
        assert_eq!(a.map(4).ok(), Some(501));
        assert!(a.map(5).is_err());
        assert_eq!(a.map_run(1, 10).ok(), Some((101, 2)));
        let s = a.slice(2, 2).expect("slice");
        assert_eq!((s.len(), s.map(0).ok(), s.map(1).ok()), (2, Some(102), Some(500)));
        assert!(a.slice(4, 2).is_err());
    }
}
