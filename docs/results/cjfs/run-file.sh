#!/usr/bin/env bash
# CJFS on the file device: varmail-shared at 32 threads (by default) with cjfs in-process on an image
# file (FileDevice: no barrier, so compound flush pays flush -> commit blocks -> flush per
# group) next to the kernel's ext4 (data=ordered) on a loop image in the same directory of
# the same disk, in one interleaved run.
#
# As root (loop device and mount); without root only the cjfs series run.
#   docs/results/cjfs/run-file.sh                  # -> docs/results/cjfs/file-device/
# Settings (environment): WORKDIR WORKLOADS THREADS DURATION REPS CI_PCT MAX_REPS SEED IMAGE_SIZE_MB OUT MODES
# COMPARE (a committed results.json to set every ratio beside)
set -euo pipefail
cd "$(dirname "$0")/../../.."

WORKDIR=${WORKDIR:-/var/tmp/cjfs-file}
WORKLOADS=${WORKLOADS:-varmail-shared}
THREADS=${THREADS:-32}
DURATION=${DURATION:-3}
REPS=${REPS:-3}
# Repeat each point until every ratio's 90 % interval is within ±CI_PCT % (up to MAX_REPS).
CI_PCT=${CI_PCT:-5}
MAX_REPS=${MAX_REPS:-10}
SEED=${SEED:-1}
IMAGE_SIZE_MB=${IMAGE_SIZE_MB:-4096}
OUT=${OUT:-docs/results/cjfs/file-device}
MODES=${MODES:-jbd2 barrierfs cjfs}

cargo build --release -q -p cjfs-cli
cjfs=$PWD/target/release/cjfs
mkdir -p "$WORKDIR"
args=(--workload "$WORKLOADS" --threads "$THREADS" --duration "$DURATION" --reps "$REPS" --ci "$CI_PCT" --max-reps "$MAX_REPS" --seed "$SEED"
      --out "$OUT" --quiet)
for m in $MODES; do args+=(--mode "$m"); done
[ -n "${COMPARE:-}" ] && args+=(--compare "$COMPARE")

if [ "$(id -u)" != 0 ]; then
  echo "run-file: not root, so no loop mount: the kernel ext4 series is skipped" >&2
  exec "$cjfs" bench run --target "cjfs-file=cjfs:file:$WORKDIR" "${args[@]}"
fi

mnt=$WORKDIR/mnt
img=$WORKDIR/ext4.img
dev=
cleanup() {
  set +e
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
  [ -n "$dev" ] && losetup -d "$dev" 2>/dev/null
  rm -rf "$mnt" "$img"
}
trap cleanup EXIT INT TERM
# Fully written (not sparse), like the cjfs image the lab preallocates next to it.
dd if=/dev/zero of="$img" bs=1M count="$IMAGE_SIZE_MB" conv=fsync status=none
# Direct I/O: a flush of the loop device is an fsync of the backing file, as a flush of
# cjfs's file device is an fdatasync of its image.
dev=$(losetup -f --show --direct-io=on "$img")
mkfs.ext4 -q -F "$dev"
mkdir -p "$mnt"
mount -o data=ordered "$dev" "$mnt"
echo "run-file: kernel ext4 $(findmnt -no SOURCE,FSTYPE,OPTIONS "$mnt")" >&2
"$cjfs" bench run --target "cjfs-file=cjfs:file:$WORKDIR" --target "ext4-ordered=dir:$mnt" "${args[@]}"
