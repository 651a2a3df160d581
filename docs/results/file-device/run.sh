#!/usr/bin/env bash
# The file device, all of it in one run: varmail-shared, varmail-split, dbench and OLTP-insert
# at 1, 4, 16 and 32 threads, every journal preset in-process on an image file and the
# kernel's ext4 (data=ordered) on a loop image in the same directory, interleaved and paired
# against `jbd2` (the first series). `auto` is not a separate series: on a file device it
# resolves to `cjfs` (`cjfs info IMG` says so), so its figure is the `cjfs` column.
#
# As root (loop device and mount):
#   docs/results/file-device/run.sh              # -> docs/results/file-device/all/
# Results are rewritten after every point, so a stopped run keeps what it measured.
# Settings (environment) as docs/results/cjfs/run-file.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export WORKLOADS=${WORKLOADS:-varmail-shared,varmail-split,dbench,oltp-insert}
export THREADS=${THREADS:-1,4,16,32}
export MODES=${MODES:-jbd2 barrierfs cjfs cjfs-v1 cjfs-v3 cjfs-no-coalescing cjfs-no-compound cjfs-no-dual}
export DURATION=${DURATION:-3}
export REPS=${REPS:-5}
export MAX_REPS=${MAX_REPS:-6}
export OUT=${OUT:-docs/results/file-device/all}
exec docs/results/cjfs/run-file.sh
