#!/usr/bin/env bash
# Polling waits and per-core work queues (XFS journaling paper) against the condvar waits and
# the shared queue, side by side in one run per device: varmail-split and exim-like at 32
# threads on the RAM disk and the Optane-like preset (the paper's devices), then oversubscribed
# (32 threads = 16x the 2 cores) on the RAM disk and the SATA preset, and eMMC (spin time and
# CPU per fsync on a slow device). Each sweep writes results.json/csv and README.md (with the
# lock-wait tables) into its own directory here.
#   docs/results/waits/run.sh            # everything (about 40 minutes)
#   ONLY=ramdisk docs/results/waits/run.sh
#   ONLY=oversub-tail OUT=docs/results/waits/intel-abc1234 docs/results/waits/run.sh  # the tail sweeps (about 15 minutes)
#   OUT=docs/results/waits/intel-abc1234 CJFS=/path/to/cjfs docs/results/waits/run.sh   # elsewhere, a given binary
set -euo pipefail
cd "$(dirname "$0")/../../.."
# A copy, so a rebuild during the sweeps does not mix binaries.
B=$(mktemp /tmp/cjfs-waits.XXXXXX)
if [ -n "${CJFS:-}" ]; then
  cp "$CJFS" "$B"
else
  cargo build --release -q -p cjfs-cli
  cp ./target/release/cjfs "$B"
fi
chmod +x "$B"
OUT=${OUT:-docs/results/waits}
mkdir -p "$OUT"
REPS=${REPS:-5}
# `cjfs` polls (`wait = spin_park`); `cjfs-condvar` is its ablation with condvar waits. Sweeps
# made before `cjfs` polled (up to intel-03c1585) name the condvar baseline `cjfs` and the
# polling series `cjfs+wait=spin_park`.
modes_cjfs=(--mode cjfs-condvar --mode cjfs --mode cjfs-condvar+dispatch=per_core --mode cjfs+dispatch=per_core)
modes_zj=(--mode zjournal --mode zjournal+wait=spin_park --mode zjournal+dispatch=per_core --mode zjournal+wait=spin_park+dispatch=per_core)
run() { # name, device, workloads, threads, modes...
  local name=$1 dev=$2 wl=$3 th=$4; shift 4
  [ -n "${ONLY:-}" ] && [[ "$name" != *"$ONLY"* ]] && return 0
  [ -s "$OUT/$name/results.json" ] && return 0
  $B bench run --target "cjfs:$dev" "$@" --workload "$wl" --threads "$th" --duration 3 --reps "$REPS" --seed 1 --quiet --out "$OUT/$name"
}
run ramdisk-32 ramdisk varmail-split,exim 32 "${modes_cjfs[@]}"
run optane-32 optane varmail-split,exim 32 "${modes_cjfs[@]}"
run zjournal-ramdisk-32 ramdisk varmail-split,exim 32 "${modes_zj[@]}"
run oversub-ramdisk ramdisk varmail-split,exim 32 --mode cjfs-condvar --mode cjfs+dispatch=per_core
run oversub-sata sata-ssd varmail-split,exim 32 --mode cjfs-condvar --mode cjfs+dispatch=per_core
run emmc emmc varmail-split 8,32 --mode cjfs-condvar --mode cjfs+dispatch=per_core
# The oversubscribed tails again with twice the repetitions, fsync p99.9 pooled over every
# repetition, and a control: `cjfs+wait=condvar` is `cjfs-condvar` under another name, so its ratio
# to the first series is the noise floor of the p99.9 ratios beside it.
REPS=${TAIL_REPS:-10} run oversub-tail-ramdisk ramdisk varmail-split,exim 32 \
  --mode cjfs-condvar --mode cjfs+wait=condvar --mode cjfs --mode cjfs+dispatch=per_core
REPS=${TAIL_REPS:-10} run oversub-tail-sata sata-ssd varmail-split,exim 32 \
  --mode cjfs-condvar --mode cjfs+wait=condvar --mode cjfs --mode cjfs+dispatch=per_core
# The wait stress (64 threads, 10^6 fsyncs, watchdog: no waiter parked 1 s after durable).
stress() { # name, device, journal
  [ -n "${ONLY:-}" ] && [[ "$1" != *"$ONLY"* ]] && return 0
  [ -s "$OUT/$1.json" ] && return 0
  $B bench stress --device "$2" --journal "$3" --json "$OUT/$1.json"
}
stress stress-ramdisk ramdisk cjfs+dispatch=per_core
stress stress-ramdisk-jbd2 ramdisk jbd2+wait=spin_park+dispatch=per_core
stress stress-emmc emmc cjfs+dispatch=per_core
