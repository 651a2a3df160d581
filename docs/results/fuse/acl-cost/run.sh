#!/usr/bin/env bash
# What FUSE_POSIX_ACL costs a cjfs FUSE mount: the last commit before the mount asked the kernel
# to enforce POSIX ACLs (7f7c002) against a later one, each serving its own fresh image
# (`cjfs mkfs`, 4 GiB, `-o writeback`), varmail-shared and fileserver at 1, 8 and 32 threads in
# one interleaved run. Needs root, /dev/fuse, fuse3, e2fsprogs.
#
#   docs/results/fuse/acl-cost/run.sh            # writes docs/results/fuse/acl-cost/
#   NEW=abc1234 WORK=/var/tmp/x docs/results/fuse/acl-cost/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
ROOT=$PWD
WORK=${WORK:-/var/tmp/cjfs-acl-cost}
OLD_REV=${OLD_REV:-7f7c002}
NEW_REV=${NEW:-HEAD}
OUT=${OUT:-$ROOT/docs/results/fuse/acl-cost}

build() { # rev, output binary
  local tree="$WORK/src-$1"
  rm -rf "$tree"
  git worktree add -q --detach "$tree" "$1"
  (cd "$tree" && CARGO_TARGET_DIR="$WORK/target" cargo build --release -q -p cjfs-cli)
  cp "$WORK/target/release/cjfs" "$2"
  git worktree remove --force "$tree"
}
unmount_all() {
  for m in old new; do
    if mountpoint -q "$WORK/mnt/$m"; then fusermount3 -u "$WORK/mnt/$m" || umount -l "$WORK/mnt/$m" || true; fi
  done
}
trap unmount_all EXIT
mkdir -p "$WORK/mnt/old" "$WORK/mnt/new"
unmount_all
build "$OLD_REV" "$WORK/cjfs-old"
build "$NEW_REV" "$WORK/cjfs-new"
OLD=$WORK/cjfs-old
NEW=$WORK/cjfs-new
rm -f "$WORK"/*.img
"$NEW" mkfs "$WORK/old.img" --size 4G >/dev/null
"$NEW" mkfs "$WORK/new.img" --size 4G >/dev/null
"$OLD" mount "$WORK/old.img" "$WORK/mnt/old" -o writeback
"$NEW" mount "$WORK/new.img" "$WORK/mnt/new" -o writeback
"$NEW" bench run --target "pre-acl=dir:$WORK/mnt/old" --target "acl=dir:$WORK/mnt/new" \
  --workload varmail-shared,fileserver --threads 1,8,32 --duration 5 --reps 5 --seed 1 --out "$OUT"
"$NEW" umount "$WORK/mnt/old"
"$NEW" umount "$WORK/mnt/new"
e2fsck -fn "$WORK/new.img"
