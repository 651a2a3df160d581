#!/usr/bin/env bash
# Speed of the journal as a set of logs against the binary of a baseline commit (default
# 6715bd0, before the set): varmail-shared at 1 and 32 threads on the emulated NVMe SSD,
# presets jbd2 and cjfs. The two binaries alternate run by run (base, head, base, head, ...;
# REPS runs of each, one repetition per run, seed = run number), so drift on the shared
# machine falls on both alike; the table gives each binary's median and head/base.
#
#   docs/results/journal-set/run.sh            # -> docs/results/journal-set/README.md, runs.csv
# Settings (environment): BASE REPS DURATION OUT WORKTREE
set -euo pipefail
cd "$(dirname "$0")/../../.."
BASE=${BASE:-6715bd0}
REPS=${REPS:-7}
DURATION=${DURATION:-3}
OUT=${OUT:-docs/results/journal-set}
WORKTREE=${WORKTREE:-/var/tmp/cjfs-base-$BASE}

if [ ! -d "$WORKTREE" ]; then
  git worktree add --detach "$WORKTREE" "$BASE" >/dev/null
fi
(cd "$WORKTREE" && cargo build --release -q -p cjfs-cli)
cargo build --release -q -p cjfs-cli
base_bin=$WORKTREE/target/release/cjfs
head_bin=$PWD/target/release/cjfs
head_rev=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo "+changes")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$OUT"
runs=$OUT/runs.csv
echo "binary,run,workload,threads,series,ops_per_sec" > "$runs"
for i in $(seq 1 "$REPS"); do
  for who in base head; do
    bin=$base_bin; [ "$who" = head ] && bin=$head_bin
    "$bin" bench run --target nvme=cjfs:nvme-consumer --workload varmail-shared --threads 1,32 \
      --mode jbd2 --mode cjfs --duration "$DURATION" --reps 1 --seed "$i" --out "$tmp/$who-$i" --quiet >/dev/null
    python3 - "$tmp/$who-$i/results.json" "$who" "$i" >> "$runs" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["points"]:
    print(f'{sys.argv[2]},{sys.argv[3]},{p["workload"]},{p["threads"]},{p["series"]},{p["ops_per_sec"]:.0f}')
PY
  done
  echo "run $i of $REPS done" >&2
done
machine=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["machine"]; print("%s x%d | kernel %s | %.0f GiB RAM" % (m["cpu"], m["cores"], m["kernel"], m["mem_gib"]))' "$tmp/head-1/results.json")
python3 - "$runs" "$BASE" "$head_rev" "$REPS" "$DURATION" "$machine" > "$OUT/README.md" <<'PY'
import csv, statistics, sys
runs, base, head, reps, dur, machine = sys.argv[1:]
rows = list(csv.DictReader(open(runs)))
keys = sorted({(r["workload"], int(r["threads"]), r["series"]) for r in rows})
print("# The journal as a set of logs: speed against the binary before it\n")
print(f"`docs/results/journal-set/run.sh`: {base} (base) and {head} (head) alternating run by run, {reps} runs")
print(f"each of {dur} s, seeds 1..{reps}; emulated nvme-consumer; medians; per-run figures in `runs.csv`.\n")
print(f"    machine: {machine}\n")
print("| workload | threads | series | base ops/s | head ops/s | head/base | within ±5 % |")
print("|---|---:|---|---:|---:|---:|---|")
for w, t, s in keys:
    b = statistics.median(float(r["ops_per_sec"]) for r in rows if r["binary"] == "base" and (r["workload"], int(r["threads"]), r["series"]) == (w, t, s))
    h = statistics.median(float(r["ops_per_sec"]) for r in rows if r["binary"] == "head" and (r["workload"], int(r["threads"]), r["series"]) == (w, t, s))
    ratio = h / b if b else float("nan")
    print(f"| {w} | {t} | {s} | {b:.0f} | {h:.0f} | {ratio:.3f} | {'yes' if abs(ratio - 1) <= 0.05 else 'no'} |")
PY
cat "$OUT/README.md"
