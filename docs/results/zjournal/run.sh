#!/usr/bin/env bash
# Per-core journaling (Z-Journal) against jbd2 and cjfs, in-process on the emulated NVMe SSD
# and the RAM disk: the paper's headline workloads at the thread counts its issue names —
# FxMark DWSL (overwrite + fsync, private files) at 16 threads in data=journal, varmail-shared
# at 32 threads, and the Fig. 8 SysBench setting (random overwrites of a shared file set,
# fsync every 100 writes) at 16 threads — with every Z-Journal ablation (no proactive frozen
# copy, no core-aware allocation, the paper's admission by core, the logs' flushes shared one
# at a time instead of each log's own) and CJFS's pipeline in every log. One interleaved run per
# table, ratios to the first series (jbd2).
#
#   docs/results/zjournal/run.sh        # -> docs/results/zjournal/{nvme,ramdisk}-*/
# Settings (environment): REPS DURATION SCALE SEED OUT (default docs/results/zjournal), BIN (a
# built cjfs binary instead of building one), ONLY (one set; default `headline`):
#   headline        the three tables above on both devices (about 12 minutes)
#   fxmark-journal  the eight no-fsync FxMark workloads at 1-32 threads in data=journal, the
#                   paper's mode (NVMe; 3 x 1 s a point; about 12 minutes)
#   fig7            SysBench Fig. 7 (random overwrites of shared large files, no fsync) at
#                   1-32 threads with and without the frozen copy and core-aware allocation
#                   (both devices; about 12 minutes)
#   fileserver      filebench fileserver and varmail-split at 16 threads (both devices)
#   logs            N = 1, 2, 4, 8 logs on the three headline workloads (NVMe)
set -euo pipefail
cd "$(dirname "$0")/../../.."
REPS=${REPS:-5}
SEED=${SEED:-1}
DURATION=${DURATION:-2}
SCALE=${SCALE:-0.25}
OUT=${OUT:-docs/results/zjournal}
[ -n "${BIN:-}" ] || cargo build --release -q -p cjfs-cli
bin=${BIN:-target/release/cjfs}
modes=(--mode jbd2 --mode cjfs --mode zjournal --mode zjournal-no-pfc --mode zjournal-no-bga --mode zjournal-cjfs --mode zjournal+admit=core
  --mode zjournal+log_flush=shared --mode zjournal-cjfs+log_flush=shared)
ONLY=${ONLY:-headline}
run() { "$bin" bench run --seed "$SEED" --quiet "$@"; }
case "$ONLY" in
headline) ;;
fxmark-journal)
  run --target nvme=cjfs:nvme-consumer --workload DWOL,DWAL,DWOM,MWCL,MWCM,MWUL,MWUM,MWRL --data journal \
    --threads 1,2,4,8,16,32 --mode jbd2 --mode zjournal --mode zjournal-cjfs --duration 1 --reps 3 \
    --scale "$SCALE" --out "$OUT/nvme-fxmark-journal"
  exit ;;
fig7)
  for dev in nvme-consumer ramdisk; do
    run --target "${dev%%-*}=cjfs:$dev" --workload sysbench-shared --threads 1,4,16,32 --mode jbd2 --mode zjournal \
      --mode zjournal-no-pfc --mode zjournal-no-bga --mode zjournal-cjfs --duration "$DURATION" --reps "$REPS" \
      --scale "$SCALE" --out "$OUT/${dev%%-*}-sysbench-fig7"
  done
  exit ;;
fileserver)
  for dev in nvme-consumer ramdisk; do
    run --target "${dev%%-*}=cjfs:$dev" --workload fileserver,varmail-split --threads 16 --mode jbd2 --mode cjfs \
      --mode zjournal --mode zjournal-no-pfc --mode zjournal-no-bga --mode zjournal-cjfs --duration "$DURATION" \
      --reps "$REPS" --scale "$SCALE" --out "$OUT/${dev%%-*}-fileserver"
  done
  exit ;;
logs)
  logs=(--mode jbd2 --mode zjournal+logs=1 --mode zjournal --mode zjournal+logs=4 --mode zjournal+logs=8)
  run --target nvme=cjfs:nvme-consumer --workload DWSL --data journal --threads 16 "${logs[@]}" \
    --duration "$DURATION" --reps "$REPS" --scale "$SCALE" --out "$OUT/nvme-logs-dwsl-journal"
  run --target nvme=cjfs:nvme-consumer --workload varmail-shared --threads 32 "${logs[@]}" \
    --duration "$DURATION" --reps "$REPS" --out "$OUT/nvme-logs-varmail-shared"
  run --target nvme=cjfs:nvme-consumer --workload sysbench-shared-fsync100 --threads 16 "${logs[@]}" \
    --duration "$DURATION" --reps "$REPS" --scale "$SCALE" --out "$OUT/nvme-logs-sysbench-fig8"
  exit ;;
*) echo "ONLY: unknown set $ONLY (headline, fxmark-journal, fig7, fileserver, logs)" >&2; exit 2 ;;
esac
for dev in nvme-consumer ramdisk; do
  short=${dev%%-*}
  "$bin" bench run --target "$short=cjfs:$dev" --workload DWSL --data journal --threads 16 "${modes[@]}" \
    --duration "$DURATION" --reps "$REPS" --seed "$SEED" --scale "$SCALE" --quiet --out "$OUT/$short-dwsl-journal"
  "$bin" bench run --target "$short=cjfs:$dev" --workload varmail-shared --threads 32 "${modes[@]}" \
    --duration "$DURATION" --reps "$REPS" --seed "$SEED" --quiet --waits --out "$OUT/$short-varmail-shared"
  "$bin" bench run --target "$short=cjfs:$dev" --workload sysbench-shared-fsync100 --threads 16 "${modes[@]}" \
    --duration "$DURATION" --reps "$REPS" --seed "$SEED" --scale "$SCALE" --quiet --out "$OUT/$short-sysbench-fig8"
done
