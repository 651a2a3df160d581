#!/usr/bin/env bash
# iJournaling (issue 17) lab figures: every table is one `cjfs bench run`, its series
# interleaved repetition by repetition, medians reported (seed 1).
#
#   docs/results/ijournal/run.sh                # everything (~25 min on 2 cores)
#   ONLY=fsync docs/results/ijournal/run.sh      # one table: fsync | append | fig9 | apps
#
# 1. fsync tester (80 KiB write, 0.1 s pause, fsync; one tester thread) with the background
#    writer at 0, 30 and 60 % of each device's write bandwidth: emulated NVMe, SATA SSD and
#    eMMC (cjfs `jbd2` and `ijournal`), and kernel ext4 ordered and ext4 `-O fast_commit` on
#    loop devices (direct I/O) on this machine's disk, whose bandwidth DISK_MB_S is measured
#    first with dd (median of 3).
# 2. Append 4 KiB + fsync on one small file: iJournaling statistics, single and commit form.
# 3. Fig. 9 sysbench (sysbench-seq) on the RAM disk, 1-16 threads.
# 4. varmail-shared, dbench, OLTP-insert at 1-32 threads on the emulated NVMe SSD.
# Settings (environment): REPS DURATION FSYNC_DURATION WORK (loop images; default
# /var/tmp/cjfs-ijlab) DISK_MB_S (skip the dd measurement) LEVELS (background shares, default
# "0 30 60") SUFFIX (appended to the fsync tester's output directories). The recheck at 60 %
# with five repetitions:  ONLY=fsync LEVELS=60 REPS=5 SUFFIX=-5reps docs/results/ijournal/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=docs/results/ijournal
REPS=${REPS:-3}
DURATION=${DURATION:-2}
FSYNC_DURATION=${FSYNC_DURATION:-10}
WORK=${WORK:-/var/tmp/cjfs-ijlab}
ONLY=${ONLY:-all}
LEVELS=${LEVELS:-0 30 60}
SUFFIX=${SUFFIX:-}
cargo build --release -q -p cjfs-cli
bin=$PWD/target/release/cjfs
want() { [ "$ONLY" = all ] || [ "$ONLY" = "$1" ]; }

if want fsync; then
  if [ "$(id -u)" != 0 ] || ! command -v mkfs.ext4 >/dev/null; then
    echo "SKIP: the fsync tester's kernel ext4 references need root and e2fsprogs"; exit 1
  fi
  mkdir -p "$WORK/mnt-ordered" "$WORK/mnt-fc"
  devs=()
  cleanup() {
    umount "$WORK/mnt-ordered" "$WORK/mnt-fc" 2>/dev/null || true
    for d in "${devs[@]}"; do losetup -d "$d" 2>/dev/null || true; done
    rm -f "$WORK/ordered.img" "$WORK/fc.img"
  }
  trap cleanup EXIT
  # The disk's write bandwidth: 512 MiB direct, median of three.
  DISK_MB_S=${DISK_MB_S:-$(for i in 1 2 3; do
      dd if=/dev/zero of="$WORK/bw" bs=1M count=512 oflag=direct conv=fdatasync 2>&1 \
        | awk '/copied/ {print int($(NF-1) * ($NF=="GB/s" ? 1000 : 1))}'
    done | sort -n | sed -n 2p)}
  rm -f "$WORK/bw"
  echo "disk write bandwidth: $DISK_MB_S MB/s" | tee "$out/disk-bandwidth$SUFFIX.txt"
  for fs in ordered fc; do
    img="$WORK/$fs.img"; rm -f "$img"; truncate -s 8G "$img"
    if [ $fs = fc ]; then mkfs.ext4 -q -F -O fast_commit "$img"; else mkfs.ext4 -q -F "$img"; fi
    dev=$(losetup --direct-io=on -f --show "$img"); devs+=("$dev")
    mount -o data=ordered "$dev" "$WORK/mnt-$fs"
  done
  for pct in $LEVELS; do
    "$bin" bench run --workload fsync-tester --threads 1 --fsync-delay-ms 100 \
      --bg-share "$pct" --disk-mb-s "$DISK_MB_S" \
      --target nvme=cjfs:nvme-consumer --target sata=cjfs:sata-ssd --target emmc=cjfs:emmc \
      --target "ext4-ordered=dir:$WORK/mnt-ordered" --target "ext4-fast_commit=dir:$WORK/mnt-fc" \
      --mode jbd2 --mode ijournal --duration "$FSYNC_DURATION" --reps "$REPS" --seed 1 --quiet \
      --out "$out/fsync-tester-bg$pct$SUFFIX" | tee "$out/fsync-tester-bg$pct$SUFFIX.txt"
  done
fi

if want append; then
  "$bin" bench run --workload append-fsync --threads 1 --target nvme=cjfs:nvme-consumer \
    --mode jbd2 --mode ijournal --mode ijournal+iform=commit --mode ijournal-shared \
    --duration "$DURATION" --reps "$REPS" --seed 1 --quiet --out "$out/append-fsync" \
    | tee "$out/append-fsync.txt"
fi

if want fig9; then
  "$bin" bench run --workload sysbench-seq --threads 1,2,4,8,16 --target ramdisk=cjfs:ramdisk \
    --mode jbd2 --mode ijournal-shared --mode ijournal --scale 0.05 \
    --duration "$DURATION" --reps "$REPS" --seed 1 --quiet --out "$out/ramdisk-sysbench-fig9" \
    | tee "$out/ramdisk-sysbench-fig9.txt"
fi

if want apps; then
  for w in varmail-shared dbench oltp-insert; do
    "$bin" bench run --workload "$w" --threads 1,4,16,32 --target nvme=cjfs:nvme-consumer \
      --mode jbd2 --mode ijournal --mode ijournal-cjfs --mode cjfs --scale 0.25 \
      --duration "$DURATION" --reps "$REPS" --seed 1 --quiet --out "$out/nvme-$w" \
      | tee "$out/nvme-$w.txt"
  done
fi

python3 docs/results/ijournal/tables.py > "$out/tables.md"
