//! Read-only structural checks of single inodes, for [`crate::image_check`] (`cjfs check`).
//!
//! [`Fs::check_inode`] validates one inode's block map (the extent tree through
//! [`crate::extent_tree::check`], every mapped block inside the file system, the xattr block
//! inside the file system) and returns what the inode owns, so a caller walking the whole
//! tree can count blocks, find blocks claimed twice and compare with the bitmaps. It never
//! writes and works on read-only mounts.

use crate::error::{FsError, FsResult};
use crate::extent_tree::{self, Mapping};
use crate::fs::Fs;
use crate::tx::ReadStore;
use crate::types::{FileType, Ino};

/// What [`Fs::check_inode`] found in one inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeCheck {
    /// Inode number.
    pub ino: Ino,
    /// Raw `i_mode` (type and permission bits).
    pub mode: u16,
    /// Type from the mode; `None` when the type bits are not a valid file type.
    pub kind: Option<FileType>,
    /// `i_links_count`.
    pub links: u16,
    /// `i_dtime` (non-zero for deleted inodes and orphans).
    pub dtime: u32,
    /// Size in bytes.
    pub size: u64,
    /// `i_flags`.
    pub flags: u32,
    /// Owner, group and project id (`i_projid`; 0 without the `project` feature).
    pub ids: [u32; 3],
    /// Data extents in logical order (empty for fast symlinks, devices, fifos, sockets).
    pub extents: Vec<Mapping>,
    /// Extent tree blocks (non-root nodes).
    pub tree_blocks: Vec<u64>,
    /// The extended attribute block, if any (may be shared between inodes).
    pub xattr_block: Option<u64>,
    /// EA inodes its attributes name, with their value sizes: those of its body's entries
    /// (`ea_inode`).
    pub ea_body: Vec<(u32, u32)>,
    /// The same for its xattr block's entries.
    pub ea_block: Vec<(u32, u32)>,
    /// For an EA inode (`EXT4_EA_INODE_FL`), its stored reference count.
    pub ea_refcount: Option<u64>,
    /// `i_blocks` as stored, in 512-byte units.
    pub blocks_512: u64,
    /// The file system's block size in bytes.
    pub block_size: u32,
}

impl InodeCheck {
    /// File system blocks `i_blocks` should count: data extents, tree blocks, the xattr
    /// block, and the blocks of each EA inode value its attributes name (as the kernel
    /// charges them to the owner, and e2fsck counts them).
    pub fn counted_blocks(&self) -> u64 {
        let data: u64 = self.extents.iter().map(|m| u64::from(m.len)).sum();
        let bs = u64::from(self.block_size);
        let ea: u64 =
            self.ea_body.iter().chain(&self.ea_block).map(|&(_, size)| u64::from(size).div_ceil(bs)).sum();
        data + self.tree_blocks.len() as u64 + u64::from(self.xattr_block.is_some()) + ea
    }

    /// Blocks `i_blocks` claims, in file system blocks.
    pub fn stored_blocks(&self) -> u64 {
        self.blocks_512 / (u64::from(self.block_size) / 512)
    }
}

impl Fs {
    /// Validate inode `ino`'s block map and return what it owns (see [`InodeCheck`]).
    ///
    /// Reads the inode as the mount sees it (no liveness check: the journal inode and
    /// orphans can be checked too). Fails with [`FsError::Corrupt`] naming the inode when
    /// the extent tree or block map is damaged, or an extent, a mapped block or the xattr
    /// block lies outside the file system. A block-mapped inode's data runs are reported as
    /// its extents and its indirect blocks as its tree blocks.
    pub fn check_inode(&self, ino: Ino) -> FsResult<InodeCheck> {
        let inner = &self.inner;
        let node = inner.inodes.get(inner, ino)?;
        let st = node.state.read();
        let d = &st.d;
        let limit = inner.geo.blocks_count;
        let first = inner.geo.first_data_block;
        let mut out = InodeCheck {
            ino,
            mode: d.mode,
            kind: FileType::from_mode(u32::from(d.mode)),
            links: d.links_count,
            dtime: d.dtime,
            size: d.size,
            flags: d.flags,
            ids: [d.uid, d.gid, if inner.geo.project { d.projid } else { 0 }],
            extents: Vec::new(),
            tree_blocks: Vec::new(),
            xattr_block: None,
            ea_body: Vec::new(),
            ea_block: Vec::new(),
            ea_refcount: crate::xattr::ea_refcount(&st),
            blocks_512: d.blocks_512(inner.geo.huge_file, inner.geo.block_size as u32),
            block_size: inner.geo.block_size as u32,
        };
        if d.file_acl != 0 {
            if d.file_acl < first || d.file_acl >= limit {
                return Err(FsError::Corrupt(format!(
                    "inode {ino}: xattr block {} is outside the file system ({limit} blocks)",
                    d.file_acl
                )));
            }
            // Reading it checks its checksum (metadata_csum).
            crate::xattr::read_block(inner, ino, d.file_acl)?;
            out.xattr_block = Some(d.file_acl);
        }
        (out.ea_body, out.ea_block) = crate::xattr::ea_refs_of(inner, &st).map_err(|e| prefix(ino, e))?;
        if d.has_extents() {
            let mut store = ReadStore { cache: &inner.cache, limit };
            extent_tree::check(&d.block, &mut store, st.csum).map_err(|e| prefix(ino, e))?;
            extent_tree::for_each_extent(&d.block, &mut store, st.csum, |m| out.extents.push(m))
                .map_err(|e| prefix(ino, e))?;
            out.tree_blocks =
                extent_tree::tree_blocks(&d.block, &mut store, st.csum).map_err(|e| prefix(ino, e))?;
            for m in &out.extents {
                if m.pblk < first || m.pblk.saturating_add(u64::from(m.len)) > limit {
                    return Err(FsError::Corrupt(format!(
                        "inode {ino}: extent at logical block {} maps blocks {}..{} outside the \
                         file system ({limit} blocks)",
                        m.lblk,
                        m.pblk,
                        m.pblk.saturating_add(u64::from(m.len))
                    )));
                }
            }
            for &b in &out.tree_blocks {
                if b < first || b >= limit {
                    return Err(FsError::Corrupt(format!(
                        "inode {ino}: extent tree block {b} is outside the file system ({limit} blocks)"
                    )));
                }
            }
        } else if crate::block_map::is_block_mapped(&st) {
            // Indirect blocks are this map's tree blocks; pointers are range-checked as read.
            let mut store = ReadStore { cache: &inner.cache, limit };
            let owned = crate::block_map::owned(&d.block, &mut store, inner.geo.block_size)
                .map_err(|e| prefix(ino, e))?;
            out.extents = owned.runs;
            out.tree_blocks = owned.indirect;
            if let Some(b) =
                out.extents.iter().map(|m| m.pblk).chain(out.tree_blocks.iter().copied()).find(|&b| b < first)
            {
                return Err(FsError::Corrupt(format!(
                    "inode {ino}: block map points to block {b}, before the first data block {first}"
                )));
            }
        }
        Ok(out)
    }
}

/// `e` with a corruption message naming inode `ino`.
pub(crate) fn prefix(ino: Ino, e: FsError) -> FsError {
    match e {
        FsError::Corrupt(m) => FsError::Corrupt(format!("inode {ino}: {m}")),
        other => other,
    }
}
