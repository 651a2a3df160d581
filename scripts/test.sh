#!/usr/bin/env bash
# The test command: format check, lints, and every test of the workspace. The tests run with
# the crash harness' planted bugs compiled in (the `planted-bugs` feature, which release
# builds of the tools never carry), so the harness can prove it catches them; the lints run
# both with and without them.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets --features cjfs-lab/planted-bugs -- -D warnings
cargo test --workspace --release --features cjfs-lab/planted-bugs
