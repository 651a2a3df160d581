//! A FUSE mount of a mutated image with a small workload.
//!
//! `cjfs mount -f IMG DIR` runs in the foreground as a judged command (so its exit status
//! and stderr are seen, like any other command's). Once the mount appears in
//! `/proc/self/mountinfo`, the workload runs through ordinary programs, each with the
//! timeout: `ls -la DIR`, creating a file with `sh -c 'printf ... > DIR/f'`, `sync DIR/f`
//! (an fsync), and `cat` of a file; then `cjfs mkdir` on the mounted image, which must be
//! refused (the image is locked; a success is reported as a finding). Then `fusermount3 -u DIR` (retried, then lazily if the
//! mount stays busy) and the daemon is waited for. A daemon still running after that is a
//! `hang`; it is killed and the mount point detached.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::classify::{CmdKind, Outcome, base_outcome, helper_outcome, judge};
use crate::error::{FuzzError, FuzzResult};
use crate::judge::{CmdRecord, JudgeEnv, fsck_clean, image_change, record};
use crate::run::{Exit, RunSpec, StdoutMode, run, spawn};

/// The note of a writing command that succeeded on a mounted image.
pub const MOUNTED_WRITE_OK: &str = "a writing command succeeded on the mounted image";

/// Whether `dir` is a mount point (per `/proc/self/mountinfo`).
pub fn is_mounted(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else { return false };
    let want = dir.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| t.lines().any(|l| l.split(' ').nth(4) == Some(want.as_str())))
        .unwrap_or(false)
}

fn helper(env: &JudgeEnv, name: &str, spec: RunSpec) -> FuzzResult<CmdRecord> {
    let spec = spec.timeout(env.timeout);
    let out = run(&spec)?;
    let outcome = helper_outcome(&out);
    Ok(record(name, &spec, CmdKind::Write, outcome, &out, String::new()))
}

/// Unmount `mnt`: `fusermount3 -u` a few times, then `-uz` (lazy). Returns whether it is
/// unmounted and what was done.
fn unmount(env: &JudgeEnv, fusermount: &Path, mnt: &Path) -> FuzzResult<(bool, String)> {
    let mut last = String::new();
    for attempt in 0..5 {
        let out = run(
            &RunSpec::new(fusermount, [std::ffi::OsStr::new("-u"), mnt.as_os_str()]).timeout(env.timeout)
        )?;
        if out.success() || !is_mounted(mnt) {
            return Ok((
                true,
                if attempt == 0 { String::new() } else { format!("unmounted at attempt {}", attempt + 1) },
            ));
        }
        last = out.stderr.trim().to_string();
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ =
        run(&RunSpec::new(fusermount, [std::ffi::OsStr::new("-uz"), mnt.as_os_str()]).timeout(env.timeout))?;
    Ok((false, format!("fusermount3 -u kept failing ({last}); detached lazily")))
}

/// Mount the copy `img` of `original` on a directory under `dir`, run the workload,
/// unmount, wait for the daemon; returns the records (`mount` is the daemon itself).
pub fn mount_workload(
    env: &JudgeEnv,
    fusermount: &Path,
    img: &Path,
    dir: &Path,
    original: &[u8],
    clean_before: Option<bool>,
    file: Option<String>,
) -> FuzzResult<Vec<CmdRecord>> {
    let mnt: PathBuf = dir.join("mnt");
    std::fs::create_dir_all(&mnt).map_err(|e| FuzzError::io(format!("mkdir {}", mnt.display()), e))?;
    let spec = RunSpec::new(
        &env.cjfs,
        [std::ffi::OsStr::new("mount"), std::ffi::OsStr::new("-f"), img.as_os_str(), mnt.as_os_str()],
    )
    .stdout(StdoutMode::Capture { limit: 1 << 20 })
    .timeout(env.timeout);
    let mut daemon = spawn(&spec)?;
    let mut recs = Vec::new();
    let start = Instant::now();
    let mut mounted = false;
    while start.elapsed() < env.timeout {
        if is_mounted(&mnt) {
            mounted = true;
            break;
        }
        if daemon.has_exited()? {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut notes = Vec::new();
    if mounted {
        let m = mnt.to_string_lossy().to_string();
        let f = format!("{m}/fuzz-fuse-file");
        let steps: Vec<(&str, RunSpec)> = {
            let mut v = vec![
                ("fuse-ls", RunSpec::new("ls", ["-la", m.as_str()])),
                ("fuse-create", RunSpec::new("sh", ["-c", &format!("printf fuzz > '{f}'")])),
                ("fuse-fsync", RunSpec::new("sync", [f.as_str()])),
            ];
            if let Some(p) = &file {
                let path = format!("{m}{p}");
                v.push((
                    "fuse-cat",
                    RunSpec::new("cat", [path.as_str()]).stdout(StdoutMode::Capture { limit: env.cat_limit }),
                ));
            }
            v
        };
        let mut hung = false;
        for (name, s) in steps {
            let r = helper(env, name, s)?;
            hung = r.outcome == Outcome::Hang;
            recs.push(r);
            if hung {
                notes.push(format!("{name} hung: the daemon was killed"));
                daemon.signal_group(libc::SIGKILL);
                break;
            }
        }
        if !hung {
            // A writing command on the mounted (locked) image must be refused.
            let i = img.to_string_lossy().to_string();
            let spec =
                RunSpec::new(&env.cjfs, ["mkdir", i.as_str(), "/fuzz-while-mounted"]).timeout(env.timeout);
            let out = run(&spec)?;
            let base = base_outcome(&out);
            let note = if base == Outcome::Ok { MOUNTED_WRITE_OK.to_string() } else { String::new() };
            recs.push(record("mounted-write", &spec, CmdKind::Write, base, &out, note));
        }
        let (clean, note) = unmount(env, fusermount, &mnt)?;
        if !note.is_empty() {
            notes.push(note);
        }
        if !clean {
            daemon.signal_group(libc::SIGKILL);
        }
        daemon.extend_deadline(env.timeout);
    } else if !daemon.has_exited()? {
        notes.push(format!("not mounted after {} s", env.timeout.as_secs()));
        daemon.extend_deadline(Duration::ZERO);
    }
    let out = daemon.wait()?;
    if is_mounted(&mnt) {
        let _ =
            run(&RunSpec::new(fusermount, [std::ffi::OsStr::new("-uz"), mnt.as_os_str()])
                .timeout(env.timeout));
        notes.push("mount point left behind; detached lazily".into());
    }
    // The daemon killed because a workload step hung is that step's hang, not its own.
    let base = match out.exit {
        Exit::Signal(libc::SIGKILL) if recs.iter().any(|r| r.outcome == Outcome::Hang) => {
            Outcome::KilledBySignal
        }
        _ => base_outcome(&out),
    };
    let change = image_change(img, original)?;
    let mut clean_after = None;
    if let (Some(e2fsck), Outcome::Ok, Some(true), Some(_)) = (&env.e2fsck, base, clean_before, &change) {
        let (v, text) = fsck_clean(e2fsck, img, env.timeout)?;
        clean_after = v;
        if v == Some(false) {
            notes.push(text);
        }
    }
    if base != Outcome::Ok
        && let Some(c) = &change
    {
        notes.push(c.clone());
    }
    let outcome = judge(CmdKind::Write, base, change.is_some(), clean_before, clean_after);
    recs.insert(0, record("mount", &spec, CmdKind::Write, outcome, &out, notes.join("; ")));
    let _ = std::fs::remove_dir(&mnt);
    Ok(recs)
}
