#!/usr/bin/env bash
# The CJFS experiments, in-process on the emulated consumer NVMe SSD (`nvme-consumer`): one
# interleaved sweep per workload over the journal presets the paper compares (jbd2 = ext4's
# JBD2, barrierfs, cjfs = CJFS-V5) and the ablations (cjfs-v1/-v3 for the MVSP sweep,
# cjfs-no-coalescing, cjfs-no-compound), so every ratio comes from the same run.
#
#   docs/results/cjfs/run.sh                       # varmail-shared -> docs/results/cjfs/varmail-shared/
#   THREADS=32 REPS=5 DURATION=5 docs/results/cjfs/run.sh
#   WORKLOADS="varmail-split oltp-insert" THREADS=10,20,40 MODES="jbd2 barrierfs cjfs" \
#     docs/results/cjfs/run.sh                     # one directory per workload
#   WORKLOADS=dbench DURATION=10 THREADS=10,20,40 MODES="jbd2 barrierfs cjfs" docs/results/cjfs/run.sh
#     (dbench needs 10 s: its T/5 warm-up must cover the load file's opening, see README)
set -euo pipefail
cd "$(dirname "$0")/../../.."

DURATION=${DURATION:-3}
REPS=${REPS:-3}
# Repeat each point until every ratio's 90 % interval is within ±CI_PCT % (up to MAX_REPS).
CI_PCT=${CI_PCT:-5}
MAX_REPS=${MAX_REPS:-10}
THREADS=${THREADS:-1,16,32}
SEED=${SEED:-1}
WORKLOADS=${WORKLOADS:-varmail-shared}
MODES=${MODES:-jbd2 barrierfs cjfs cjfs-v1 cjfs-v3 cjfs-no-coalescing cjfs-no-compound}

cargo build --release -q -p cjfs-cli
args=()
for m in $MODES; do args+=(--mode "$m"); done
for w in $WORKLOADS; do
  ./target/release/cjfs bench run --target cjfs:nvme-consumer "${args[@]}" \
    --workload "$w" --threads "$THREADS" --duration "$DURATION" --reps "$REPS" --ci "$CI_PCT" --max-reps "$MAX_REPS" \
    --seed "$SEED" --out "${OUT:-docs/results/cjfs/$w}" --quiet
done
