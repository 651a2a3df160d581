//! fio random writes with `verify=crc32c` (verified as written), then a separate read-only
//! verify pass after unmount and remount: the data fio wrote is what comes back.

mod common;

use std::process::Command;

use common::*;

fn fio(dir: &std::path::Path, extra: &[&str]) -> String {
    let mut cmd = Command::new("fio");
    cmd.current_dir(dir).args([
        "--name=randw",
        "--filename=fio.dat",
        "--size=96m",
        "--bs=4k",
        "--rw=randwrite",
        "--ioengine=psync",
        "--numjobs=1",
        "--verify=crc32c",
        "--verify_state_save=0",
        "--randseed=4242",
        "--fsync=64",
        "--end_fsync=1",
    ]);
    cmd.args(extra);
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "fio {extra:?} failed ({}):\n{text}", out.status);
    assert!(!text.contains("verify: bad"), "fio verify failed:\n{text}");
    assert!(text.contains("err= 0"), "fio reported an error:\n{text}");
    text
}

#[test]
fn fio_random_writes_verify_crc32c() {
    if skip("fio_random_writes_verify_crc32c", &["fio"]) {
        return;
    }
    let s = Scratch::new(512 << 20);
    let m = s.mount("");
    // Write with verification of each block as it is written back.
    fio(&s.mnt, &["--do_verify=1"]);
    m.unmount();
    e2fsck_clean(&s.image);
    // A separate pass that only reads and checks what the first pass wrote.
    let m = s.mount("");
    fio(&s.mnt, &["--verify_only"]);
    // And the same through the writeback cache configuration.
    m.unmount();
    let m = s.mount("writeback");
    fio(&s.mnt, &["--verify_only"]);
    fio(&s.mnt, &["--randseed=77", "--do_verify=1", "--direct=1"]);
    m.unmount();
    e2fsck_clean(&s.image);
}
