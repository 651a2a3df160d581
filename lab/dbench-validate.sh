#!/usr/bin/env bash
# Validation of the lab's dbench generator against the real dbench.
#
# On one kernel ext4 (data=ordered) loop mount, runs the real `dbench --sync-dir` and the
# lab's replay (`cjfs bench run --target dir:... --workload dbench`, which has --sync-dir
# semantics) with the same loadfile, client count and time, alternating: ROUNDS rounds, each
# running every client count once, real and lab back to back (real first in odd rounds, lab
# first in even ones). Both count what dbench counts (bytes requested by ReadX and WriteX,
# warm-up of T/5 s left out, the last one-second sample before the time limit). The
# acceptance is a lab / real ratio of the mean MB/s within 0.70 .. 1.30 at every client
# count. Prints every run, the summary table and the operation counts of the last round;
# exits 1 when a ratio is out of bounds.
#
# Needs root (loop device, mount). Without root it prints SKIP and exits 0.
#
# Usage: lab/dbench-validate.sh
# Settings (environment):
#   CLIENTS        client counts                       (default "1 4 16")
#   ROUNDS         rounds (real+lab pairs per count)   (default 4)
#   SECS           dbench -t / lab --duration, seconds (default 10)
#   LOADFILE       dbench loadfile                     (default /usr/share/dbench/client.txt)
#   WORKDIR        where the image lives               (default /var/tmp/cjfs-dbench-validate)
#   IMAGE_SIZE_MB  image size                          (default 4096)
#   MOUNT          use this mounted directory instead of making an image (no root needed
#                  for the image then, but the runs still want a real file system)
#   OUT            also write the results as markdown to this file
#   CJFS           cjfs binary (default: build target/release/cjfs)
set -euo pipefail
cd "$(dirname "$0")/.."

CLIENTS=${CLIENTS:-1 4 16}
ROUNDS=${ROUNDS:-4}
SECS=${SECS:-10}
LOADFILE=${LOADFILE:-/usr/share/dbench/client.txt}
WORKDIR=${WORKDIR:-/var/tmp/cjfs-dbench-validate}
IMAGE_SIZE_MB=${IMAGE_SIZE_MB:-4096}
MOUNT=${MOUNT:-}
OUT=${OUT:-}

log() { echo "dbench-validate: $*" >&2; }

if [ -z "$MOUNT" ] && [ "$(id -u)" != 0 ]; then
  echo "SKIP: dbench validation: needs root for the loop device and the ext4 mount (or set MOUNT=DIR)"
  exit 0
fi

need=()
command -v dbench >/dev/null && [ -r "$LOADFILE" ] || need+=(dbench)
[ -n "$MOUNT" ] || command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "SKIP: dbench validation: ${need[*]} missing (install with apt-get install ${need[*]})"
    exit 0
  fi
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ -r "$LOADFILE" ] || { echo "dbench-validate: loadfile $LOADFILE not readable" >&2; exit 2; }

if [ -z "${CJFS:-}" ]; then
  cargo build --release -q -p cjfs-cli
  CJFS=$PWD/target/release/cjfs
fi

logs=$(mktemp -d)
dev=
mnt=$MOUNT
cleanup() {
  set +e
  if [ -z "$MOUNT" ]; then
    [ -n "$mnt" ] && mountpoint -q "$mnt" && { umount "$mnt" || umount -l "$mnt"; }
    [ -n "$dev" ] && losetup -d "$dev"
    rm -rf "${WORKDIR:?}/ext4.img" "${WORKDIR:?}/mnt"
    rmdir "$WORKDIR" 2>/dev/null
  fi
  rm -rf "$logs"
}
trap cleanup EXIT INT TERM

if [ -z "$MOUNT" ]; then
  mkdir -p "$WORKDIR/mnt"
  mnt=$WORKDIR/mnt
  # Fully written, not sparse: no run pays the host file system's block allocation. Direct
  # I/O on the loop device, as lab/peers.sh mounts its kernel peers: no double caching, and
  # a flush of the loop device is an fsync of the image file.
  log "making a ${IMAGE_SIZE_MB} MiB ext4 image in $WORKDIR"
  dd if=/dev/zero of="$WORKDIR/ext4.img" bs=1M count="$IMAGE_SIZE_MB" conv=fsync status=none
  dev=$(losetup -f --show --direct-io=on "$WORKDIR/ext4.img")
  mkfs.ext4 -q -F "$dev"
  mount -o data=ordered "$dev" "$mnt"
fi
fs_desc=$(findmnt -no SOURCE,FSTYPE,OPTIONS --target "$mnt" | tr -s ' ' || echo "$mnt")
machine="$(nproc)-core $(uname -m) VM, $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), $(awk '/MemTotal/ {printf "%.0f GiB RAM", $2 / 1048576}' /proc/meminfo), kernel $(uname -r)"
dbench_version=$(dbench --help 2>&1 | awk '/^dbench version/ {print $3; exit}' || true)
log "machine: $machine"
log "file system: $fs_desc"

# Between runs: make everything durable and, on our own image, remount, so every run starts
# from a checkpointed journal and a cold cache of this file system and no run pays for the
# previous one's leftovers.
settle() {
  sync -f "$mnt"
  if [ -z "$MOUNT" ] && umount "$mnt"; then
    mount -o data=ordered "$dev" "$mnt"
  fi
  sleep 1
}

# real N LOG: the real dbench in a fresh directory; prints MB/s.
real() {
  local d=$mnt/dbench-real
  rm -rf "$d"
  mkdir -p "$d"
  dbench -D "$d" -t "$SECS" --sync-dir -c "$LOADFILE" "$1" >"$2" 2>&1 || true
  rm -rf "$d"
  settle
  awk '/^Throughput/ {print $2; f = 1} END {if (!f) print 0}' "$2"
}

# lab N JSON: the lab's replay (the bench runner makes and removes its own directory).
lab() {
  local tmp
  tmp=$(mktemp -d)
  "$CJFS" bench run --target "dir:$mnt" --workload dbench --threads "$1" --duration "$SECS" \
    --reps 1 --quiet --dbench-loadfile "$LOADFILE" --out "$tmp" >/dev/null 2>&1 || true
  cp "$tmp/results.json" "$2" 2>/dev/null || : >"$2"
  awk -F, '!/^#/ && $1 == "dbench" {print $6; f = 1} END {if (!f) print 0}' "$tmp/results.csv" 2>/dev/null ||
    echo 0
  rm -rf "$tmp"
  settle
}

# Operation counts: dbench's table, and the replay's <Op>_count extras.
real_ops() { awk '/^ Operation/ {t = 1; next} /^Throughput/ {exit} t && NF == 4 && $2 ~ /^[0-9]+$/ && !seen[$1]++ {print $1, $2}' "$1"; }
lab_ops() {
  awk '/"[A-Za-z]+_count",/ {gsub(/[ ",]/, ""); n = $0; sub(/_count$/, "", n); getline; gsub(/[ ,]/, ""); printf "%s %d\n", n, $0}' "$1"
}

# Rounds outermost: every round runs each client count once, real and lab back to back, so
# a noisy spell of the machine is spread over the client counts instead of spoiling one of
# them. Odd rounds run real first, even rounds lab first (real, lab, lab, real, ...), so
# neither side always runs in the other's wake.
declare -A reals labs
runs=()
for r in $(seq 1 "$ROUNDS"); do
  for n in $CLIENTS; do
    if [ $((r % 2)) = 1 ]; then
      a=$(real "$n" "$logs/real-$n.txt")
      b=$(lab "$n" "$logs/lab-$n.json")
    else
      b=$(lab "$n" "$logs/lab-$n.json")
      a=$(real "$n" "$logs/real-$n.txt")
    fi
    log "round $r clients $n: real dbench $a MB/s, lab replay $b MB/s"
    reals[$n]="${reals[$n]:-} $a"
    labs[$n]="${labs[$n]:-} $b"
    runs+=("$(printf '| %d | %d | %.1f | %.1f | %.2f |' "$r" "$n" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {print (a > 0 ? b / a : 0)}')")")
  done
done

rows=()
opmix=()
fail=0
for n in $CLIENTS; do
  # Means (the acceptance: lab mean / real mean within 0.70 .. 1.30), and for information the
  # geometric mean of the per-round lab / real ratios, which a noisy spell sways less.
  row=$(awk -v real="${reals[$n]}" -v lab="${labs[$n]}" -v n="$n" 'BEGIN {
      k = split(real, r, " "); split(lab, l, " ")
      for (i = 1; i <= k; i++) {
        rs += r[i]; ls += l[i]
        rr = rr (i > 1 ? ", " : "") sprintf("%.1f", r[i]); lr = lr (i > 1 ? ", " : "") sprintf("%.1f", l[i])
        if (r[i] > 0 && l[i] > 0) { g += log(l[i] / r[i]); m++ }
      }
      rm = rs / k; lm = ls / k; q = rm > 0 ? lm / rm : 0
      printf "| %d | %.1f (%s) | %.1f (%s) | %.2f | %.2f | %s |", n, rm, rr, lm, lr, q, m ? exp(g / m) : 0,
        (q >= 0.7 && q <= 1.3) ? "yes" : "NO"
    }')
  rows+=("$row")
  case $row in *"| NO |") fail=1 ;; esac
  # Operation counts of the measured phase of the last round.
  while read -r op rc; do
    lc=$(lab_ops "$logs/lab-$n.json" | awk -v o="$op" '$1 == o {print $2}')
    opmix+=("| $n | $op | $rc | ${lc:-0} |")
  done < <(real_ops "$logs/real-$n.txt")
done

report() {
  echo "Machine: $machine; shared, so expect noise."
  echo "File system: kernel ext4 on a loop image: $fs_desc."
  echo "Real: \`dbench -D DIR -t $SECS --sync-dir -c $LOADFILE N\` (dbench $dbench_version)."
  echo "Lab: \`cjfs bench run --target dir:MOUNT --workload dbench --threads N --duration $SECS --reps 1\`."
  echo "$ROUNDS rounds; each round runs every client count, real and lab back to back (real first in odd"
  echo "rounds, lab first in even ones); the file system is synced and remounted between runs; MB/s = 10^6 B/s."
  echo
  echo "| clients | real dbench MB/s: mean (runs) | lab replay MB/s: mean (runs) | lab / real (means) | geometric mean of per-round lab / real | within ±30% |"
  echo "|---:|---:|---:|---:|---:|:---:|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Individual runs, in the order they ran:"
  echo
  echo "| round | clients | real MB/s | lab MB/s | lab / real |"
  echo "|---:|---:|---:|---:|---:|"
  printf '%s\n' "${runs[@]}"
  echo
  echo "Operation counts of the measured phase in the last round (dbench's table; the replay's \`<Op>_count\`):"
  echo
  echo "| clients | operation | real dbench | lab replay |"
  echo "|---:|---|---:|---:|"
  printf '%s\n' "${opmix[@]}"
}

report
[ -z "$OUT" ] || report >"$OUT"
if [ "$fail" = 1 ]; then
  log "FAIL: a lab / real ratio is outside 0.70 .. 1.30"
  exit 1
fi
log "PASS: every lab / real ratio within 0.70 .. 1.30"
