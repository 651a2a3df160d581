#!/usr/bin/env bash
# cjfs side by side with the kernel's file systems, in one run on one machine.
#
# As root: makes loop images in $WORKDIR and mounts kernel ext4 (data=ordered,
# data=journal, fast_commit), XFS and fuse2fs; runs the same `cjfs bench run` sweep on all of
# them plus cjfs in-process (jbd2 and nojournal, on the emulated $PRESET and on the file
# device in $WORKDIR, next to the loop images); validates the lab's dbench replay against the
# real dbench binary on the ext4 (data=ordered) mount; tears everything down (trap).
# Without root: says so and runs only the in-process targets.
#
# Usage: lab/peers.sh [extra `cjfs bench run` arguments...]
# Settings (environment): OUT WORKDIR WORKLOADS THREADS DURATION REPS CI_PCT MAX_REPS SEED PRESET IMAGE_SIZE_MB
#                         VALIDATE_CLIENTS (empty: skip the dbench validation) VALIDATE_SECS
#
# Loop devices use direct I/O (`losetup --direct-io=on`): no double caching, and a flush of
# the loop device is an fsync of the backing file, as a flush of cjfs's file device is an
# fdatasync of its image.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-docs/results/baseline}
WORKDIR=${WORKDIR:-/var/tmp/cjfs-peers}
WORKLOADS=${WORKLOADS:-varmail-shared,varmail-split,dbench}
THREADS=${THREADS:-1,2,4,8,16,32}
DURATION=${DURATION:-3}
REPS=${REPS:-3}
# Repeat each point until every ratio's 90 % interval is within ±CI_PCT % (up to MAX_REPS).
CI_PCT=${CI_PCT:-5}
MAX_REPS=${MAX_REPS:-10}
SEED=${SEED:-1}
PRESET=${PRESET:-nvme-consumer}
IMAGE_SIZE_MB=${IMAGE_SIZE_MB:-4096}
VALIDATE_CLIENTS=${VALIDATE_CLIENTS-1 4 16}
VALIDATE_SECS=${VALIDATE_SECS:-20}

log() { echo "peers: $*" >&2; }

cargo build --release -q -p cjfs-cli
cjfs=$PWD/target/release/cjfs
mkdir -p "$WORKDIR" "$OUT"

common=(--workload "$WORKLOADS" --threads "$THREADS" --duration "$DURATION" --reps "$REPS" --ci "$CI_PCT" --max-reps "$MAX_REPS" --seed "$SEED"
        --mode jbd2 --mode nojournal --out "$OUT")

if [ "$(id -u)" != 0 ]; then
  log "not root: loop devices and mounts need root, so the kernel peers (ext4, XFS, fuse2fs) are skipped;"
  log "running only the in-process cjfs targets"
  exec "$cjfs" bench run --target "cjfs-file=cjfs:file:$WORKDIR" --target "cjfs-$PRESET=cjfs:$PRESET" \
    "${common[@]}" "$@"
fi

# Tools: install what is missing (apt-get update first).
need=()
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v mkfs.xfs >/dev/null || need+=(xfsprogs)
command -v fuse2fs >/dev/null || need+=(fuse2fs)
{ command -v dbench >/dev/null && [ -r /usr/share/dbench/client.txt ]; } || need+=(dbench)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

mounts=()
loops=()
cleanup() {
  set +e
  for m in "${mounts[@]}"; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
  rm -rf "${WORKDIR:?}/img" "${WORKDIR:?}/mnt"
}
trap cleanup EXIT INT TERM

mkdir -p "$WORKDIR/img" "$WORKDIR/mnt"

# A fully written (not sparse) image, so no run pays the host file system's block
# allocation; the cjfs image in $WORKDIR is preallocated the same way by the lab.
image() {
  local img=$WORKDIR/img/$1.img
  dd if=/dev/zero of="$img" bs=1M count="$IMAGE_SIZE_MB" conv=fsync status=none
  echo "$img"
}

# kernel NAME MKFS_CMD MOUNT_OPTS
kernel() {
  local name=$1 mkfs=$2 opts=$3 img dev mnt
  img=$(image "$name")
  dev=$(losetup -f --show --direct-io=on "$img")
  loops+=("$dev")
  $mkfs "$dev" >/dev/null
  mnt=$WORKDIR/mnt/$name
  mkdir -p "$mnt"
  mount -o "$opts" "$dev" "$mnt"
  mounts+=("$mnt")
  log "$name: $(findmnt -no SOURCE,FSTYPE,OPTIONS "$mnt")"
}

log "making loop images of ${IMAGE_SIZE_MB} MiB in $WORKDIR/img"
kernel ext4-ordered "mkfs.ext4 -q -F" data=ordered
kernel ext4-journal "mkfs.ext4 -q -F" data=journal
kernel ext4-fc "mkfs.ext4 -q -F -O fast_commit" data=ordered
kernel xfs "mkfs.xfs -q -f" defaults
img=$(image fuse2fs)
mkfs.ext4 -q -F "$img"
mkdir -p "$WORKDIR/mnt/fuse2fs"
fuse2fs "$img" "$WORKDIR/mnt/fuse2fs" -o rw
mounts+=("$WORKDIR/mnt/fuse2fs")
log "fuse2fs: $(findmnt -no SOURCE,FSTYPE,OPTIONS "$WORKDIR/mnt/fuse2fs")"

m=$WORKDIR/mnt
"$cjfs" bench run \
  --target "ext4-ordered=dir:$m/ext4-ordered" \
  --target "ext4-journal=dir:$m/ext4-journal" \
  --target "ext4-fc=dir:$m/ext4-fc" \
  --target "xfs=dir:$m/xfs" \
  --target "fuse2fs=dir:$m/fuse2fs" \
  --target "cjfs-file=cjfs:file:$WORKDIR" \
  --target "cjfs-$PRESET=cjfs:$PRESET" \
  "${common[@]}" "$@"

# Validation of the dbench generator against the real dbench on the ext4 (data=ordered) mount:
# lab/dbench-validate.sh (real and lab runs alternating, same loadfile, clients and time, both
# counted as dbench counts); its table goes to $OUT/dbench-validation-runs.md.
if [ -n "$VALIDATE_CLIENTS" ]; then
  MOUNT=$m/ext4-ordered CLIENTS=$VALIDATE_CLIENTS SECS=$VALIDATE_SECS CJFS=$cjfs \
    OUT=$OUT/dbench-validation-runs.md lab/dbench-validate.sh >/dev/null ||
    log "dbench validation: a lab / real ratio is out of bounds (see $OUT/dbench-validation-runs.md)"
fi
log "results in $OUT"
