//! git on a cjfs mount: `git init`, a few hundred files committed over several commits,
//! `git fsck --full` clean, and clean again after unmount and remount.

mod common;

use common::*;

#[test]
fn git_commit_and_fsck_after_remount() {
    if skip("git_commit_and_fsck_after_remount", &["git"]) {
        return;
    }
    let s = Scratch::new(512 << 20);
    let m = s.mount("");
    let repo = s.p("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = "git -c user.name=cjfs -c user.email=cjfs@example.invalid -c init.defaultBranch=main \
               -c core.fsync=all -c gc.auto=0";
    sh(&repo, &format!("{git} init -q ."));
    for round in 0..4u64 {
        for i in 0..100u64 {
            let d = repo.join(format!("dir{}", i % 10));
            std::fs::create_dir_all(&d).unwrap();
            let len = 200 + ((i * 7919 + round * 31) % 20_000) as usize;
            std::fs::write(d.join(format!("file{round}-{i}.txt")), pattern(round * 1000 + i, len)).unwrap();
            // And rewrite one file of an earlier round (modifications, not only additions).
            if round > 0 && i % 10 == 3 {
                std::fs::write(d.join(format!("file0-{i}.txt")), pattern(round * 7 + i, len / 2)).unwrap();
            }
        }
        sh(&repo, &format!("{git} add -A && {git} commit -q -m 'round {round}'"));
    }
    sh(&repo, &format!("{git} mv dir0 moved && {git} rm -q -r dir1 && {git} commit -q -m moves"));
    sh(&repo, &format!("{git} gc -q"));
    let fsck = sh(&repo, &format!("{git} fsck --full --strict 2>&1"));
    assert!(!fsck.contains("error") && !fsck.contains("missing"), "git fsck: {fsck}");
    let files = sh(&repo, &format!("{git} ls-files | wc -l"));
    assert_eq!(files.trim(), "360", "400 files committed, the 40 of dir1 removed");
    m.unmount();
    e2fsck_clean(&s.image);
    let m = s.mount("");
    let fsck = sh(&repo, &format!("{git} fsck --full --strict 2>&1"));
    assert!(!fsck.contains("error") && !fsck.contains("missing"), "git fsck after remount: {fsck}");
    let log = sh(&repo, &format!("{git} log --oneline | wc -l"));
    assert_eq!(log.trim(), "5");
    sh(&repo, &format!("{git} status --porcelain | (! grep .)"));
    m.unmount();
}
