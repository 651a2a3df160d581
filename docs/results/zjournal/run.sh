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
# built cjfs binary instead of building one)
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
for dev in nvme-consumer ramdisk; do
  short=${dev%%-*}
  "$bin" bench run --target "$short=cjfs:$dev" --workload DWSL --data journal --threads 16 "${modes[@]}" \
    --duration "$DURATION" --reps "$REPS" --seed "$SEED" --scale "$SCALE" --quiet --out "$OUT/$short-dwsl-journal"
  "$bin" bench run --target "$short=cjfs:$dev" --workload varmail-shared --threads 32 "${modes[@]}" \
    --duration "$DURATION" --reps "$REPS" --seed "$SEED" --quiet --waits --out "$OUT/$short-varmail-shared"
  "$bin" bench run --target "$short=cjfs:$dev" --workload sysbench-shared-fsync100 --threads 16 "${modes[@]}" \
    --duration "$DURATION" --reps "$REPS" --seed "$SEED" --scale "$SCALE" --quiet --out "$OUT/$short-sysbench-fig8"
done
