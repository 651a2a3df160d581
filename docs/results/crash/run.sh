#!/usr/bin/env bash
# The full crash suite (`cjfs crashtest --all`) for every journal mode, one mode at a time,
# each summary kept as JSON next to this script (a mode already done is skipped).
#   docs/results/crash/run.sh                 # every mode
#   MODES="cjfs barrierfs" docs/results/crash/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
MODES=${MODES:-jbd2 nojournal barrierfs cjfs cjfs-v1 cjfs-v3 cjfs-no-coalescing cjfs-no-compound cjfs-no-dual}
OUT=docs/results/crash
cargo build --release -q -p cjfs-cli
for m in $MODES; do
  [ -s "$OUT/$m.json" ] && continue
  ./target/release/cjfs crashtest --all --mode "$m" --json --quiet --failures "$OUT/failures-$m" > "$OUT/$m.json.tmp"
  mv "$OUT/$m.json.tmp" "$OUT/$m.json"
done
