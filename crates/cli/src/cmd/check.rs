//! `cjfs check`: the library's whole-image check on a read-only mount
//! ([`cjfs_fs::image_check`], which says what it looks at and what it leaves to e2fsck),
//! then `e2fsck -fn` when installed (unless `--no-e2fsck`): a clean e2fsck is the final word.

use std::path::{Path, PathBuf};
use std::process::Command;

use cjfs_fs::image_check::{check_image, layout_checksum_errors};

use crate::error::{CliError, CliResult};
use crate::image::{Ctx, with_ro};
use crate::out::outln;

/// Run the library's check on a read-only mount. Prints a summary; returns the error count.
fn own_check(image: &str, ctx: &Ctx) -> CliResult<usize> {
    with_ro(image, ctx, |fs| {
        let r = check_image(fs).map_err(|e| CliError::fs(image, e))?;
        outln!("cjfs check of {image}:");
        outln!(
            "  {} inode(s) reachable: {} directories, {} regular files, {} other",
            r.inodes,
            r.dirs,
            r.files,
            r.others
        );
        outln!(
            "  {} block(s) in use: {} static metadata, {} journal, {} file data and trees ({} free of {})",
            r.blocks_in_use,
            r.meta_blocks,
            r.journal_blocks,
            r.data_blocks,
            r.block_count - r.blocks_in_use.min(r.block_count),
            r.block_count
        );
        if r.dup_blocks > 0 {
            outln!("  {} block(s) owned twice", r.dup_blocks);
        }
        for m in &r.warnings {
            outln!("  warning: {m}");
        }
        for m in &r.errors {
            outln!("  error: {m}");
        }
        if r.error_count > r.errors.len() {
            outln!("  ... and {} more error(s)", r.error_count - r.errors.len());
        }
        let verdict = if r.error_count == 0 { "no errors" } else { "ERRORS FOUND" };
        outln!("  result: {verdict} ({} error(s), {} warning(s))", r.error_count, r.warnings.len());
        Ok(r.error_count)
    })
}

/// Find a program in `PATH` or the usual sbin directories (e2fsck lives in /sbin).
fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// What an `e2fsck` exit status means.
fn e2fsck_status(code: i32) -> String {
    let mut v = Vec::new();
    for (bit, what) in [
        (1, "errors corrected"),
        (2, "reboot needed"),
        (4, "errors left uncorrected"),
        (8, "operational error"),
        (16, "usage or syntax error"),
        (32, "cancelled"),
        (128, "shared library error"),
    ] {
        if code & bit != 0 {
            v.push(what);
        }
    }
    if v.is_empty() { "clean".to_string() } else { v.join(", ") }
}

/// Run `e2fsck -fn`; returns whether it found the image clean.
fn run_e2fsck(tool: &Path, image: &str) -> CliResult<bool> {
    let out =
        Command::new(tool).args(["-fn", image]).output().map_err(|e| CliError::io(tool.display(), e))?;
    let code = out.status.code().unwrap_or(-1);
    let clean = code == 0;
    outln!("e2fsck -fn {image}: exit status {code} ({})", e2fsck_status(code));
    if !clean {
        for l in
            String::from_utf8_lossy(&out.stdout).lines().chain(String::from_utf8_lossy(&out.stderr).lines())
        {
            outln!("  | {l}");
        }
    }
    Ok(clean)
}

/// The superblock and group descriptor checksums, read before mounting (a mount refuses
/// the first mismatch). Prints each mismatch; returns how many.
fn layout_checksums(image: &str) -> CliResult<usize> {
    let dev = crate::image::open_device(image, true)?;
    // A refused feature first: its layout (bigalloc's clusters, say) is not what the
    // descriptor checks below assume, so their mismatches would only hide the cause.
    // (A superblock that does not even read is reported below, as a checksum mismatch.)
    if let Ok(sb) = crate::image::read_primary_superblock(image, &dev) {
        cjfs_fs::ondisk::features::check_supported_for(&sb, cjfs_fs::ondisk::features::Access::ReadOnly)
            .map_err(|e| CliError::fs(image, e))?;
    }
    // An image this cannot even read is reported by the mount below, in its words.
    let Ok(errs) = layout_checksum_errors(&*dev) else { return Ok(0) };
    for m in &errs {
        outln!("  error: {m}");
    }
    Ok(errs.len())
}

/// Run `cjfs check`.
pub fn run(image: &str, ctx: &Ctx, e2fsck: bool) -> CliResult<()> {
    let layout = layout_checksums(image)?;
    let errors = if layout == 0 {
        own_check(image, ctx)?
    } else {
        outln!("  (the image cannot be mounted to check the rest: {layout} checksum error(s) above)");
        layout
    };
    let mut fsck_failed = false;
    if e2fsck {
        match find_tool("e2fsck") {
            Some(tool) => fsck_failed = !run_e2fsck(&tool, image)?,
            None => outln!("e2fsck: not installed; skipped"),
        }
    }
    match (errors, fsck_failed) {
        (0, false) => Ok(()),
        (0, true) => Err(CliError::Msg(format!("{image}: e2fsck -fn found problems"))),
        (n, false) => Err(CliError::Msg(format!("{image}: {n} error(s) found"))),
        (n, true) => {
            Err(CliError::Msg(format!("{image}: {n} error(s) found, and e2fsck -fn found problems")))
        }
    }
}
