//! ext4 on-disk structures, one per file. Pure encode/decode of byte slices; no I/O.

pub mod acl;
pub mod bitmap;
pub mod csum;
pub mod dirent;
pub mod extent;
pub mod fast_commit;
pub mod features;
pub mod group_desc;
pub mod htree;
pub mod ijournal;
pub mod inode;
pub mod orphan_file;
pub mod superblock;
pub mod xattr;
