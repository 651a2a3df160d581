#!/usr/bin/env bash
# The full crash suite (`cjfs crashtest --all`) for every journal mode, one mode at a time,
# each summary kept as JSON next to this script (a mode already done is skipped).
#   docs/results/crash/run.sh                 # every mode
#   MODES="cjfs barrierfs" docs/results/crash/run.sh
#   DATA=journal MODES="jbd2 cjfs" docs/results/crash/run.sh   # data=journal, MODE-data-journal.json
#   BARRIER=no MODES="barrierfs cjfs" docs/results/crash/run.sh  # device without a cache barrier, MODE-no-barrier.json
set -euo pipefail
cd "$(dirname "$0")/../../.."
MODES=${MODES:-auto jbd2 nojournal barrierfs cjfs cjfs-v1 cjfs-v3 cjfs-no-coalescing cjfs-no-compound cjfs-no-dual cjfs-condvar}
OUT=docs/results/crash
DATA=${DATA:-ordered}
BARRIER=${BARRIER:-yes}
SUFFIX=$([ "$DATA" = ordered ] || echo "-data-$DATA")$([ "$BARRIER" = yes ] || echo "-no-barrier")
BARRIER_FLAG=$([ "$BARRIER" = yes ] || echo "--no-barrier")
cargo build --release -q -p cjfs-cli
for m in $MODES; do
  f="$OUT/$m$SUFFIX.json"
  [ -s "$f" ] && continue
  ./target/release/cjfs crashtest --all --mode "$m" --data "$DATA" $BARRIER_FLAG --json --quiet --failures "$OUT/failures-$m$SUFFIX" > "$f.tmp"
  mv "$f.tmp" "$f"
done
