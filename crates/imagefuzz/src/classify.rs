//! Outcome classes of one command run, and the rules that assign them.
//!
//! A run first gets a *base* class from how it ended ([`base_outcome`]): `ok`, `refused`,
//! `multi_line_error`, `panic`, `hang` or `killed_by_signal`. Then [`judge`] applies the
//! image checks: a read-only command, or a writing command that failed, must leave the image
//! bytes as they were (`changed_by_readonly`), and a writing command that succeeded on an
//! image `e2fsck -fn` found clean must leave it clean (`write_left_unclean`).

use serde::{Deserialize, Serialize};

use crate::run::{Exit, RunOutput};

/// The class of one command run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Exit status 0.
    Ok,
    /// Non-zero exit with one line on stderr starting with `cjfs: `.
    Refused,
    /// Non-zero exit whose stderr is not exactly one `cjfs: ` line (more lines, none, or
    /// another prefix). A defect class; a failure only in strict runs.
    MultiLineError,
    /// Killed by a signal the fuzzer did not send (SIGPIPE, SIGXFSZ, SIGABRT, SIGSEGV, ...).
    KilledBySignal,
    /// Exit status 101 or `panicked` on stderr.
    Panic,
    /// Still running at the timeout (then killed).
    Hang,
    /// A read-only command, or a writing command that failed, changed the image bytes.
    ChangedByReadonly,
    /// A writing command succeeded on an image `e2fsck -fn` found clean, and `e2fsck -fn`
    /// finds it unclean afterwards.
    WriteLeftUnclean,
}

impl Outcome {
    /// Every class, in report order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Ok,
        Outcome::Refused,
        Outcome::MultiLineError,
        Outcome::KilledBySignal,
        Outcome::Panic,
        Outcome::Hang,
        Outcome::ChangedByReadonly,
        Outcome::WriteLeftUnclean,
    ];

    /// The class's name as printed and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::MultiLineError => "multi_line_error",
            Outcome::KilledBySignal => "killed_by_signal",
            Outcome::Panic => "panic",
            Outcome::Hang => "hang",
            Outcome::ChangedByReadonly => "changed_by_readonly",
            Outcome::WriteLeftUnclean => "write_left_unclean",
        }
    }

    /// Whether this class is a failure: panic, hang, changed_by_readonly and
    /// write_left_unclean always; multi_line_error only when `strict`.
    pub fn is_failure(self, strict: bool) -> bool {
        match self {
            Outcome::Panic | Outcome::Hang | Outcome::ChangedByReadonly | Outcome::WriteLeftUnclean => true,
            Outcome::MultiLineError => strict,
            Outcome::Ok | Outcome::Refused | Outcome::KilledBySignal => false,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a command may write the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CmdKind {
    /// Must never change the image.
    Read,
    /// May change the image when it succeeds; must not when it fails.
    Write,
}

/// Whether `stderr` is exactly one line starting with `cjfs: `.
pub fn is_one_cjfs_line(stderr: &str) -> bool {
    let t = stderr.strip_suffix('\n').unwrap_or(stderr);
    !t.is_empty() && !t.contains('\n') && t.starts_with("cjfs: ")
}

/// Whether the run panicked: exit status 101 or `panicked` on stderr (also a panic in a
/// background thread of a command that still exited 0).
pub fn panicked(out: &RunOutput) -> bool {
    out.exit == Exit::Code(101) || out.stderr.contains("panicked")
}

/// The base class of a run of `cjfs`, from its exit and stderr alone.
pub fn base_outcome(out: &RunOutput) -> Outcome {
    if out.exit == Exit::Timeout {
        return Outcome::Hang;
    }
    if panicked(out) {
        return Outcome::Panic;
    }
    match out.exit {
        Exit::Code(0) => Outcome::Ok,
        Exit::Code(_) if is_one_cjfs_line(&out.stderr) => Outcome::Refused,
        Exit::Code(_) => Outcome::MultiLineError,
        Exit::Signal(_) => Outcome::KilledBySignal,
        Exit::Timeout => Outcome::Hang,
    }
}

/// The base class of a helper program (`ls`, `sh`, `sync` on a FUSE mount): only hangs
/// and signals mean something; any other failure is the file system refusing, `refused`.
pub fn helper_outcome(out: &RunOutput) -> Outcome {
    match out.exit {
        Exit::Timeout => Outcome::Hang,
        Exit::Code(0) => Outcome::Ok,
        Exit::Code(_) => Outcome::Refused,
        Exit::Signal(_) => Outcome::KilledBySignal,
    }
}

/// The final class of a run: `base` from [`base_outcome`]; `changed`: the image bytes
/// differ after the run; `clean_before` / `clean_after`: `e2fsck -fn` found the image
/// clean before / after (`None`: not checked).
pub fn judge(
    kind: CmdKind,
    base: Outcome,
    changed: bool,
    clean_before: Option<bool>,
    clean_after: Option<bool>,
) -> Outcome {
    if matches!(base, Outcome::Hang | Outcome::Panic) {
        return base;
    }
    match kind {
        CmdKind::Read if changed => Outcome::ChangedByReadonly,
        CmdKind::Read => base,
        CmdKind::Write if base != Outcome::Ok && changed => Outcome::ChangedByReadonly,
        CmdKind::Write if base == Outcome::Ok && clean_before == Some(true) && clean_after == Some(false) => {
            Outcome::WriteLeftUnclean
        }
        CmdKind::Write => base,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn out(exit: Exit, stderr: &str) -> RunOutput {
        RunOutput {
            exit,
            stdout_head: Vec::new(),
            stdout_len: 0,
            stdout_closed_early: false,
            stderr: stderr.to_string(),
            stderr_truncated: false,
            streams_incomplete: false,
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn base_classes() {
        assert_eq!(base_outcome(&out(Exit::Code(0), "")), Outcome::Ok);
        assert_eq!(base_outcome(&out(Exit::Code(1), "cjfs: ls: a.img: bad\n")), Outcome::Refused);
        assert_eq!(base_outcome(&out(Exit::Code(1), "cjfs: a\ncjfs: b\n")), Outcome::MultiLineError);
        assert_eq!(base_outcome(&out(Exit::Code(1), "")), Outcome::MultiLineError);
        assert_eq!(base_outcome(&out(Exit::Code(1), "error: x\n")), Outcome::MultiLineError);
        assert_eq!(base_outcome(&out(Exit::Code(101), "")), Outcome::Panic);
        assert_eq!(base_outcome(&out(Exit::Code(0), "thread 'x' panicked at a.rs:1\n")), Outcome::Panic);
        assert_eq!(base_outcome(&out(Exit::Signal(13), "")), Outcome::KilledBySignal);
        assert_eq!(base_outcome(&out(Exit::Timeout, "")), Outcome::Hang);
    }

    #[test]
    fn image_rules() {
        use CmdKind::*;
        assert_eq!(judge(Read, Outcome::Ok, true, None, None), Outcome::ChangedByReadonly);
        assert_eq!(judge(Read, Outcome::Refused, false, None, None), Outcome::Refused);
        assert_eq!(judge(Write, Outcome::Ok, true, None, None), Outcome::Ok);
        assert_eq!(judge(Write, Outcome::Refused, true, None, None), Outcome::ChangedByReadonly);
        assert_eq!(judge(Write, Outcome::Ok, true, Some(true), Some(false)), Outcome::WriteLeftUnclean);
        assert_eq!(judge(Write, Outcome::Ok, true, Some(false), Some(false)), Outcome::Ok);
        assert_eq!(judge(Write, Outcome::Panic, true, Some(true), Some(false)), Outcome::Panic);
        assert!(Outcome::Hang.is_failure(false));
        assert!(!Outcome::MultiLineError.is_failure(false));
        assert!(Outcome::MultiLineError.is_failure(true));
    }
}
