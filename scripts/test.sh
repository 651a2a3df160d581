#!/usr/bin/env bash
# The test command: format check, lints, and every test of the workspace. The tests run with
# the crash harness' planted bugs compiled in (the `planted-bugs` feature, which release
# builds of the tools never carry), so the harness can prove it catches them; the lints run
# both with and without them. Debug runs of the journal, fs and workload tests check the lock
# order.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --features cjfs-lab/planted-bugs -- -D warnings
cargo test --workspace --release --features cjfs-lab/planted-bugs
# Debug builds check every lock acquisition against its rank (cjfs_journal::lock_rank): run
# the journal's and the file system's tests, and every lab workload, with the check on.
cargo test -p cjfs-journal -p cjfs-fs
cargo test -p cjfs-lab --lib --test bench_smoke
# The polling-wait protocol's model test (every interleaving, with loom's primitives).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p cjfs-journal --release --lib polling
