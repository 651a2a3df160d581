#!/usr/bin/env bash
# Reproduce docs/results/joj: the journaling-of-journal SQLite matrix with the SQLite library
# (in-process on cjfs on the emulated eMMC and SATA presets, through an SQLite VFS), its
# extension (TRUNCATE and PERSIST rollback journals, the NVMe preset), the same matrix
# through `cjfs mount` (FUSE, on an image file), and the crash suites of `joj` and `adaptive`.
#
#   docs/results/joj/run.sh            # everything but the full crash suites (~1 h on 2 cores)
#   CRASH=1 docs/results/joj/run.sh    # also `cjfs crashtest --all` for joj and adaptive (hours)
#
# Record counts are scaled down where the emulated eMMC makes the paper's full counts take
# hours: 1,000 records per round with one operation per transaction (the paper: 10,000),
# the full 10,000 with 1,000 operations per transaction.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=docs/results/joj
cargo build --release -p cjfs-cli
cjfs=target/release/cjfs
REPS=${REPS:-5}
# The in-process matrix goes to a directory named after the commit measured.
rev=$(git rev-parse --short HEAD)

# The paper's 24 cells in-process, the paper's five configurations and `adaptive` with the
# switch back to ordered that empties the journal (as ext4), for comparison.
$cjfs bench sqlite --device emmc,sata-ssd --modes delete,wal --per-txn 1,1000 \
    --records-small 1000 --records-large 10000 --reps "$REPS" --seed 1 --out "$out/inprocess-$rev" \
    --config nojournal,ordered,data,joj,adaptive+leave=empty,adaptive \
    | tee "$out/inprocess-$rev.txt"

# `adaptive` (ordered-data checksums on, only short-lived files data-journaled) against its
# ablation without the checksums (the paper's policy) and `nojournal`, the 24 cells.
$cjfs bench sqlite --device emmc,sata-ssd --modes delete,wal --per-txn 1,1000 \
    --records-small 1000 --records-large 10000 --reps "$REPS" --seed 1 --out "$out/osum-$rev" \
    --config nojournal,adaptive+osum=off,adaptive \
    | tee "$out/osum-$rev.txt"

# Extension: the other rollback-journal modes, and NVMe.
$cjfs bench sqlite --device emmc,sata-ssd --modes truncate,persist --per-txn 1,1000 \
    --records-small 1000 --records-large 10000 --reps 1 --seed 1 --out "$out/extension-modes" \
    | tee "$out/extension-modes.txt"
$cjfs bench sqlite --device nvme-consumer --modes delete,wal --per-txn 1,1000 \
    --records-small 1000 --records-large 10000 --reps "$REPS" --seed 1 --out "$out/extension-nvme" \
    | tee "$out/extension-nvme.txt"

# Through FUSE (needs /dev/fuse and root or fusermount3), on image files in /var/tmp.
if [ -e /dev/fuse ]; then
    $cjfs bench sqlite --fuse /var/tmp/cjfs-joj-fuse --modes delete,wal --per-txn 1,1000 \
        --records-small 300 --records-large 3000 --reps 1 --seed 1 --out "$out/fuse" \
        | tee "$out/fuse.txt"
    # The same through FUSE mounts this program serves from the emulated eMMC and SATA
    # presets (no host disk under them).
    $cjfs bench sqlite --fuse /var/tmp/cjfs-joj-fuse --fuse-emulated --device emmc,sata-ssd \
        --modes delete,wal --per-txn 1,1000 --records-small 1000 --records-large 10000 \
        --reps 3 --seed 1 --out "$out/fuse-emulated-$rev" | tee "$out/fuse-emulated-$rev.txt"
else
    echo "SKIP: no /dev/fuse: the FUSE matrix is not run"
fi

# The crash CI subset in each preset's other data mode (CI runs joj with data=journal and
# adaptive with data=ordered).
$cjfs crashtest --mode joj --data ordered | tee "$out/crash-ci-joj-ordered.txt"
$cjfs crashtest --mode adaptive --data journal | tee "$out/crash-ci-adaptive-journal.txt"

if [ "${CRASH:-0}" = 1 ]; then
    $cjfs crashtest --all --mode joj --data journal --json > "$out/crash-joj-journal.json"
    $cjfs crashtest --all --mode adaptive --json > "$out/crash-adaptive-ordered.json"
    $cjfs crashtest --all --mode adaptive+osum=off --json > "$out/crash-adaptive-no-osum.json"
fi
