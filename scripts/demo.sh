#!/usr/bin/env bash
# The main job: build cjfs, make and fill an image, have e2fsck judge it, and run the smoke
# benchmark (cjfs next to raw pwrite+fdatasync on this disk, and 16-thread varmail).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v e2fsck >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq e2fsprogs
fi
cargo build --release -q -p cjfs-cli
cjfs=target/release/cjfs
work=$(mktemp -d "${TMPDIR:-/var/tmp}/cjfs-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
img="$work/demo.img"

echo "== mkfs, put, ls =="
$cjfs mkfs "$img" --size 1G
$cjfs mkdir "$img" /docs
$cjfs put "$img" README.md /docs/README.md
$cjfs put "$img" Cargo.toml /Cargo.toml
$cjfs ls "$img" / -l
echo
echo "== outside judge: e2fsck -fn =="
if command -v e2fsck >/dev/null 2>&1; then
  e2fsck -fn "$img" && echo "e2fsck: clean"
else
  echo "e2fsck not installed: skipped"
fi
echo
echo "== bench smoke =="
$cjfs bench smoke --dir "$work"
