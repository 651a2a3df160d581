//! Turns a transaction into JBD2 log blocks: revoke blocks first, then descriptor blocks
//! each followed by the logged copies their tags describe; the commit block separately.

use std::sync::Arc;

use cjfs_blockdev::{BlockBuf, BlockKind, zeroed_block};

use crate::buffer::{Buffer, Tid};
use crate::checksum::csum_seed;
use crate::commit_block::CommitBlock;
use crate::descriptor::{DescriptorBuilder, make_tag};
use crate::error::JResult;
use crate::revoke_block::RevokeBuilder;
use crate::superblock::JournalFeatures;

/// The transaction's log blocks in log order, without the commit block. With the v1
/// transaction checksum (`COMPAT_CHECKSUM`), which does not cover revoke blocks, revoke
/// records stay in each block's first sector (see [`RevokeBuilder::sector_atomic`]).
pub(crate) fn build_log_blocks(
    tid: Tid,
    features: JournalFeatures,
    uuid: [u8; 16],
    versions: &[(Arc<Buffer>, BlockBuf)],
    revokes: &[u64],
    block_size: usize,
) -> JResult<Vec<(BlockKind, BlockBuf)>> {
    let homes: Vec<(u64, BlockBuf)> = versions.iter().map(|(b, v)| (b.blocknr(), v.clone())).collect();
    build_log_blocks_for(tid, features, uuid, &homes, revokes, block_size)
}

/// [`build_log_blocks`] for `(home block, image)` pairs.
pub(crate) fn build_log_blocks_for(
    tid: Tid,
    features: JournalFeatures,
    uuid: [u8; 16],
    versions: &[(u64, BlockBuf)],
    revokes: &[u64],
    block_size: usize,
) -> JResult<Vec<(BlockKind, BlockBuf)>> {
    let seq = tid as u32;
    let seed = csum_seed(&uuid);
    let per_desc = DescriptorBuilder::max_tags(&features, block_size).max(1);
    let mut out = Vec::with_capacity(versions.len() + versions.len() / per_desc + 2);
    if !revokes.is_empty() {
        let mut rb = RevokeBuilder::new(seq, features, uuid, block_size);
        if features.compat_checksum() {
            rb = rb.sector_atomic();
        }
        for &r in revokes {
            rb.push(r);
        }
        for blk in rb.finish() {
            out.push((BlockKind::JournalRevoke, BlockBuf::from(blk)));
        }
    }
    for chunk in versions.chunks(per_desc) {
        let mut desc = DescriptorBuilder::new(seq, features, uuid, block_size);
        let mut logged = Vec::with_capacity(chunk.len());
        for (b, v) in chunk {
            let data: BlockBuf = if v[..4] == crate::descriptor::JBD2_MAGIC.to_be_bytes() {
                // Escaping rewrites the first word: log a private copy, keep the version intact.
                let mut tag_data = zeroed_block(block_size);
                tag_data.copy_from_slice(&v[..]);
                let tag = make_tag(*b, &mut tag_data[..], seq, &features, seed);
                let pushed = desc.try_push(tag);
                debug_assert!(pushed);
                BlockBuf::from(tag_data)
            } else {
                let tag = crate::descriptor::Tag {
                    blocknr: *b,
                    flags: 0,
                    checksum: if features.csum_v2or3() {
                        let c = crate::checksum::block_tag_csum(seed, seq, &v[..]);
                        if features.csum_v3() { c } else { c & 0xFFFF }
                    } else {
                        0
                    },
                };
                let pushed = desc.try_push(tag);
                debug_assert!(pushed);
                v.clone()
            };
            logged.push(data);
        }
        out.push((BlockKind::JournalDescriptor, BlockBuf::from(desc.finish())));
        out.extend(logged.into_iter().map(|d| (BlockKind::JournalLogged, d)));
    }
    Ok(out)
}

/// JBD2's v1 transaction checksum (`calc_chksums` in recovery, `crc32_sum` in commit):
/// crc32_be from `~0` over every descriptor block and every logged block, as written
/// (escaped), in log order; revoke blocks are not covered.
pub(crate) fn v1_checksum(blocks: &[(BlockKind, BlockBuf)]) -> u32 {
    blocks
        .iter()
        .filter(|(k, _)| matches!(k, BlockKind::JournalDescriptor | BlockKind::JournalLogged))
        .fold(!0u32, |crc, (_, b)| crate::checksum::crc32_be(crc, &b[..]))
}

/// The commit block of transaction `tid` whose log blocks are `blocks`, with its chain marks
/// when the journal has several logs. With `COMPAT_CHECKSUM` it carries the v1 checksum
/// of `blocks` (never zero fields: recovery takes type 0, size 0, sum 0 as "no checksum").
pub(crate) fn commit_block(
    tid: Tid,
    features: JournalFeatures,
    uuid: [u8; 16],
    chain: Option<&crate::commit_block::ChainMarks>,
    blocks: &[(BlockKind, BlockBuf)],
    block_size: usize,
) -> JResult<BlockBuf> {
    let mut cb = CommitBlock::now(tid as u32);
    if features.compat_checksum() && !features.csum_v2or3() {
        cb = cb.with_v1_checksum(v1_checksum(blocks));
    }
    Ok(BlockBuf::from(cb.encode_with(&features, csum_seed(&uuid), chain, block_size)?))
}
