//! A bounded fuzzing run (300 mutated images by default, under a minute on 2 cores in
//! release mode) that must find no failure: no panic, hang, changed_by_readonly or
//! write_left_unclean. Failing images are saved under `target/<profile>/imagefuzz-ci/` and
//! can be replayed with `cargo run --release -p cjfs-imagefuzz -- --corpus DIR`.
//!
//! `IMAGEFUZZ_CI_IMAGES` and `IMAGEFUZZ_CI_SEED` change the size and seed of the run;
//! `CJFS_BIN` the binary judged.

mod common;

use std::time::Duration;

use cjfs_imagefuzz::campaign::{Config, run_campaign};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn bounded_run_finds_no_failure() {
    let cjfs = common::cjfs_binary();
    common::note_e2fsck();
    let mounts = if common::fuse_available() { 4 } else { 0 };
    let out = common::profile_dir().join("imagefuzz-ci");
    let _ = std::fs::remove_dir_all(&out);
    let failures = out.join("failures");
    let cfg = Config {
        images: env_num("IMAGEFUZZ_CI_IMAGES", 300) as usize,
        seed: env_num("IMAGEFUZZ_CI_SEED", 1),
        cjfs,
        timeout: Duration::from_secs(20),
        jobs: 2,
        mounts,
        save_failures: Some(failures.clone()),
        json: Some(out.join("failures.json")),
        ..Config::default()
    };
    let report = run_campaign(&cfg).expect("the fuzzing run itself failed");
    println!("{}", report.render());
    let n = report.failure_count();
    assert_eq!(
        n,
        0,
        "{n} failing command run(s) (groups above); images saved in {}, JSON lines in {}; replay with \
         `cargo run --release -p cjfs-imagefuzz -- --corpus {}`",
        failures.display(),
        out.join("failures.json").display(),
        failures.display()
    );
}
