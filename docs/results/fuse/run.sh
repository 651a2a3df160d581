#!/usr/bin/env bash
# varmail-shared at 1-32 threads on a cjfs FUSE mount (`cjfs mount`), compared in the same
# interleaved run with the kernel's ext4 (loop mount) and fuse2fs, each on a fresh image of
# the same size in the same directory. Needs root, /dev/fuse, fuse3, fuse2fs, e2fsprogs.
#
#   docs/results/fuse/run.sh            # writes docs/results/fuse/varmail-shared/
#   WORK=/var/tmp/x SIZE=8G DURATION=10 REPS=5 docs/results/fuse/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."

WORK=${WORK:-/var/tmp/cjfs-fuse-bench}
SIZE=${SIZE:-4G}
DURATION=${DURATION:-5}
REPS=${REPS:-3}
THREADS=${THREADS:-1,2,4,8,16,32}
OUT=${OUT:-docs/results/fuse/varmail-shared}

cargo build --release -q -p cjfs-cli
CJFS=$PWD/target/release/cjfs

unmount_all() {
  for m in cjfs fuse2fs; do
    if mountpoint -q "$WORK/mnt/$m"; then fusermount3 -u "$WORK/mnt/$m" || umount -l "$WORK/mnt/$m" || true; fi
  done
  if mountpoint -q "$WORK/mnt/ext4"; then umount "$WORK/mnt/ext4" || true; fi
}
trap unmount_all EXIT
unmount_all

mkdir -p "$WORK/mnt/ext4" "$WORK/mnt/fuse2fs" "$WORK/mnt/cjfs"
rm -f "$WORK"/*.img
truncate -s "$SIZE" "$WORK/ext4.img" "$WORK/fuse2fs.img"
mkfs.ext4 -q -F "$WORK/ext4.img"
mkfs.ext4 -q -F "$WORK/fuse2fs.img"
"$CJFS" mkfs "$WORK/cjfs.img" --size "$SIZE" >/dev/null

mount -o loop "$WORK/ext4.img" "$WORK/mnt/ext4"
fuse2fs "$WORK/fuse2fs.img" "$WORK/mnt/fuse2fs" -o rw
"$CJFS" mount "$WORK/cjfs.img" "$WORK/mnt/cjfs" -o writeback

set -x
"$CJFS" bench run \
  --target "ext4=dir:$WORK/mnt/ext4" \
  --target "fuse2fs=dir:$WORK/mnt/fuse2fs" \
  --target "cjfs-fuse=dir:$WORK/mnt/cjfs" \
  --workload varmail-shared --threads "$THREADS" \
  --duration "$DURATION" --reps "$REPS" --seed 1 --out "$OUT"
set +x

# The cjfs image must be clean after the run and a clean unmount.
fusermount3 -u "$WORK/mnt/cjfs"
while ! flock -n "$WORK/cjfs.img" true; do sleep 0.2; done
e2fsck -fn "$WORK/cjfs.img"
