#!/usr/bin/env bash
# The main job: build cjfs, make and fill an image, have e2fsck judge it, run the smoke
# benchmark (cjfs next to raw pwrite+fdatasync on this disk, and 16-thread varmail), compare
# cjfs with its JBD2 baseline and with the kernel's ext4 (loop mount, as root), and run the
# crash harness' fast subset on the baseline and one preset per technique family; per-core
# journaling (Z-Journal), journaling of journal (SQLite) and iJournaling (fsync tester)
# against JBD2, polling waits against condvar waits. A few minutes after the build.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v e2fsck >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq e2fsprogs
fi
cargo build --release -q -p cjfs-cli
cjfs=target/release/cjfs
work=$(mktemp -d "${TMPDIR:-/var/tmp}/cjfs-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
img="$work/demo.img"

echo "== mkfs, put, ls =="
$cjfs mkfs "$img" --size 1G
$cjfs mkdir "$img" /docs
$cjfs put "$img" README.md /docs/README.md
$cjfs put "$img" Cargo.toml /Cargo.toml
$cjfs ls "$img" / -l
echo
echo "== outside judge: e2fsck -fn =="
if command -v e2fsck >/dev/null 2>&1; then
  e2fsck -fn "$img" && echo "e2fsck: clean"
else
  echo "e2fsck not installed: skipped"
fi
echo
echo "== bench smoke =="
$cjfs bench smoke --dir "$work"
echo
echo "== cjfs against its JBD2 baseline: emulated consumer NVMe, varmail-shared, 32 threads =="
$cjfs bench run --target cjfs:nvme-consumer --mode jbd2 --mode barrierfs --mode cjfs \
  --workload varmail-shared --threads 32 --duration 3 --reps 5 --ci 5 --max-reps 8 --seed 1 \
  --out "$work/nvme" --quiet --compare docs/results/cjfs/nvme-32t-50b30bc/results.json
echo
echo "== per-core journaling (Z-Journal) against JBD2: emulated consumer NVMe, varmail-shared, 32 threads =="
$cjfs bench run --target nvme=cjfs:nvme-consumer --mode jbd2 --mode zjournal --mode zjournal-cjfs \
  --workload varmail-shared --threads 32 --duration 2 --reps 3 --seed 1 \
  --out "$work/zjournal" --quiet --compare docs/results/zjournal/amd-244fc59/nvme-varmail-shared/results.json
echo
echo "== journaling of journal: SQLite (the library, in-process) on the emulated eMMC and SATA SSD, rollback journal and WAL, 1-op transactions =="
$cjfs bench sqlite --device emmc,sata-ssd --modes delete,wal --per-txn 1 --records-small 200 --reps 1 --seed 1
echo
echo "== iJournaling against JBD2: fsync tester (80 KiB write, 0.1 s pause, fsync) beside a background writer at 30 % of the emulated SATA SSD's bandwidth =="
$cjfs bench run --workload fsync-tester --threads 1 --fsync-delay-ms 100 --bg-share 30 \
  --target sata=cjfs:sata-ssd --mode jbd2 --mode ijournal --duration 5 --reps 3 --seed 1 --quiet
echo
echo "== polling waits (XFS journaling paper; cjfs polls) against condvar waits (cjfs-condvar): emulated Optane-like SSD, varmail-split, 32 threads (wait-lock ms: time spent waiting for the journal's shared wait locks) =="
$cjfs bench run --target cjfs:optane --mode cjfs-condvar --mode cjfs --workload varmail-split \
  --threads 32 --duration 2 --reps 3 --seed 1 --out "$work/waits" --quiet \
  --compare docs/results/waits/intel-589f337/optane-32/results.json
echo "where the threads waited (median run of each series, from the run's lock-wait tables):"
grep '^#### ' "$work/waits/README.md" | sed 's/^#### /  /'
echo
echo "== cjfs against the kernel's ext4 on this disk: varmail-shared, 32 threads =="
WORKDIR="$work/file" IMAGE_SIZE_MB=1024 THREADS=32 REPS=5 CI_PCT=5 MAX_REPS=8 MODES="jbd2 cjfs" OUT="$work/file-out" \
  COMPARE=docs/results/file-device/all/results.json \
  docs/results/cjfs/run-file.sh
echo
echo "== crash test: fast subset (docs/results/crash/ has the full suite for every mode) =="
$cjfs crashtest --mode jbd2 --mode barrierfs --mode cjfs --mode zjournal --mode joj --mode adaptive --mode ijournal --quiet --failures "$work/crash-failures"
