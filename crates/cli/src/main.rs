//! `cjfs`: the command line tool of the cjfs file system engine.
//!
//! Makes ext4 images (`mkfs`), shows them (`info`), works on files inside them like
//! `debugfs` does (`ls`, `cat`, `get`, `put`, `mkdir`, `rm`, `mv`, `ln`, `stat`), replays
//! their journal (`recover`) and checks them (`check`).
//!
//! Every failure prints one line, `cjfs: <command>: <cause>`, on stderr and exits with
//! status 1 (2 for usage errors). Images the tool refuses are never written to: commands
//! that write validate the image through a read-only device first.

mod bench;
mod cmd;
mod crashtest;
mod error;
mod fmt;
mod image;
mod mount;
mod out;
mod sqlite_fuse;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use cjfs_fs::{DataMode, MountOptions};
use clap::{Args, Parser, Subcommand};

use crate::error::{CliError, CliResult};
use crate::image::Ctx;

/// cjfs: an ext4-compatible file system engine in user space.
#[derive(Debug, Parser)]
#[command(
    name = "cjfs",
    version,
    about = "cjfs: make, inspect, edit, recover and check ext4 images",
    long_about = "cjfs: make, inspect, edit, recover and check ext4 images.\n\n\
        Errors print one line `cjfs: <command>: <cause>` on stderr; the exit status is 1 \
        for errors and 2 for usage errors. An image that is refused is never written to."
)]
struct Cli {
    /// Journal preset for commands that mount the image (`auto`: the preset measured fastest
    /// for the device, see `cjfs info`): auto, jbd2, nojournal, barrierfs, cjfs, cjfs-v1,
    /// cjfs-v3, cjfs-no-coalescing, cjfs-no-compound, cjfs-no-dual, cjfs-condvar, zjournal,
    /// zjournal-no-pfc, zjournal-no-bga, zjournal-cjfs, ijournal, ijournal-shared,
    /// ijournal-cjfs, joj, adaptive; a named preset may carry technique settings, e.g. `cjfs+dispatch=per_core`,
    /// `zjournal+logs=4` or `cjfs+commit=single_io`.
    #[arg(
        long,
        global = true,
        value_name = "PRESET",
        default_value = "auto",
        value_parser = preset_arg
    )]
    journal: String,
    /// Default data mode for commands that mount the image.
    #[arg(
        long,
        global = true,
        value_name = "MODE",
        default_value = "ordered",
        value_parser = clap::builder::PossibleValuesParser::new(["ordered", "journal"])
    )]
    data: String,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Make a new ext4 file system on an image file (created if missing) or a block device.
    Mkfs(MkfsArgs),
    /// Show the superblock and journal of an image (reads only, never writes).
    Info {
        /// Image file or block device.
        image: String,
    },
    /// List a directory (or show one file) inside the image.
    Ls {
        /// Image file or block device.
        image: String,
        /// Path inside the image.
        #[arg(default_value = "/")]
        path: OsString,
        /// Long listing: type and mode, links, uid, gid, size, inode, name.
        #[arg(short = 'l')]
        long: bool,
        /// Also list `.` and `..`.
        #[arg(short = 'a')]
        all: bool,
    },
    /// Write a file's contents to stdout.
    Cat {
        /// Image file or block device.
        image: String,
        /// Path inside the image (symbolic links are followed).
        path: OsString,
    },
    /// Copy a local file into the image, creating or truncating the target.
    Put {
        /// Image file or block device.
        image: String,
        /// Local file to copy, or `-` for stdin.
        local: OsString,
        /// Target path inside the image; an existing directory receives the local file's name.
        path: OsString,
    },
    /// Copy a file out of the image.
    Get {
        /// Image file or block device.
        image: String,
        /// Path inside the image (symbolic links are followed).
        path: OsString,
        /// Local file to write (created or truncated), or `-` for stdout.
        local: OsString,
    },
    /// Make a directory inside the image.
    Mkdir {
        /// Image file or block device.
        image: String,
        /// Directory to make.
        path: OsString,
        /// Make missing parents too; an existing directory is not an error.
        #[arg(short = 'p')]
        parents: bool,
    },
    /// Remove a file or an empty directory inside the image.
    Rm {
        /// Image file or block device.
        image: String,
        /// Path to remove.
        path: OsString,
        /// Remove directories and their contents recursively.
        #[arg(short = 'r')]
        recursive: bool,
    },
    /// Rename or move a file or directory inside the image.
    Mv {
        /// Image file or block device.
        image: String,
        /// Existing path.
        from: OsString,
        /// New path; an existing directory receives the entry under its current name.
        to: OsString,
    },
    /// Make a hard link (or with -s a symbolic link) inside the image.
    Ln {
        /// Image file or block device.
        image: String,
        /// Existing path (hard link) or link target text (symbolic link).
        target: OsString,
        /// The new link; an existing directory receives it under the target's name.
        link: OsString,
        /// Make a symbolic link.
        #[arg(short = 's')]
        symbolic: bool,
    },
    /// Show every attribute of a file inside the image (times, flags, extents, xattrs).
    Stat {
        /// Image file or block device.
        image: String,
        /// Path inside the image (a final symbolic link is not followed).
        path: OsString,
    },
    /// Show the usage and limits the quota files record per user, group and project
    /// (`quota`/`project` images; reads only).
    Quota {
        /// Image file or block device.
        image: String,
    },
    /// Replay the image's journal and report what was replayed.
    Recover {
        /// Image file or block device.
        image: String,
    },
    /// Check the image's structure (read-only), then run `e2fsck -fn` if installed.
    ///
    /// The own check walks every directory from the root and checks each reachable inode's
    /// type, links and extent tree, blocks owned twice, the bitmaps and free counts, and the
    /// orphan list. It does not check what only e2fsck checks (unreachable inodes' contents,
    /// i_blocks of ordinary files, directory block slack and htree nodes, xattr contents,
    /// backup superblocks, the journal's log): the e2fsck run is the final word.
    Check {
        /// Image file or block device.
        image: String,
        /// Do not run e2fsck after our own check.
        #[arg(long)]
        no_e2fsck: bool,
    },
    /// Benchmarks: smoke test, device check and workload sweeps (see `cjfs bench --help`).
    Bench(bench::BenchArgs),
    /// Crash-consistency harness: record workloads, cut them at every persistence point,
    /// recover, check with e2fsck and a logical model, for every journal mode.
    Crashtest(crashtest::CrashtestArgs),
    /// Mount an image through FUSE (daemonizes once the mount is ready; see `cjfs mount --help`).
    Mount(mount::MountArgs),
    /// Unmount a `cjfs mount` and wait until the image is written home, clean and released.
    Umount(mount::UmountArgs),
}

/// Arguments of `cjfs mkfs`.
#[derive(Debug, Args)]
struct MkfsArgs {
    /// Image file (created if missing) or block device.
    image: String,
    /// Size, e.g. 64M, 1G, 4G, 512K (required to create a file; optional for a block
    /// device, which is used whole by default; an existing file is resized to it).
    #[arg(long, value_parser = image::parse_size)]
    size: Option<u64>,
    /// Volume label (at most 16 bytes).
    #[arg(long, value_name = "L")]
    label: Option<String>,
    /// Block size in bytes: 1024, 2048 or 4096 (suffixes like 1K accepted).
    #[arg(long, short = 'b', value_name = "BYTES", value_parser = image::parse_size, default_value = "4096")]
    block_size: u64,
    /// Journal size in blocks (default: like mke2fs for the file system size).
    #[arg(long, value_name = "N")]
    journal_blocks: Option<u32>,
    /// An extra log area of N blocks inside the journal inode, after the journal
    /// (repeat for more; for techniques that run several logs; invisible to stock tools).
    #[arg(long = "log-area", value_name = "N")]
    log_areas: Vec<u32>,
    /// An ijournal area of N blocks inside the journal inode, after the log areas (repeat
    /// for more: iJournaling writes fsync records to one per core; at least 16 blocks;
    /// invisible to stock tools).
    #[arg(long = "ijournal-area", value_name = "N")]
    ijournal_areas: Vec<u32>,
    /// Bytes per inode (default 16384; suffixes like 16K accepted).
    #[arg(long, value_name = "BYTES", value_parser = image::parse_size)]
    inode_ratio: Option<u64>,
    /// Overwrite an existing ext2/3/4 file system.
    #[arg(long)]
    force: bool,
    /// Leave out metadata_csum (on by default, as with mke2fs): no checksums on the
    /// superblock, descriptors, bitmaps, inodes, extent, directory and xattr blocks.
    #[arg(long)]
    no_metadata_csum: bool,
}

impl Command {
    /// The subcommand's name, for error messages.
    fn name(&self) -> &'static str {
        match self {
            Command::Mkfs(_) => "mkfs",
            Command::Info { .. } => "info",
            Command::Ls { .. } => "ls",
            Command::Cat { .. } => "cat",
            Command::Put { .. } => "put",
            Command::Get { .. } => "get",
            Command::Mkdir { .. } => "mkdir",
            Command::Rm { .. } => "rm",
            Command::Mv { .. } => "mv",
            Command::Ln { .. } => "ln",
            Command::Stat { .. } => "stat",
            Command::Quota { .. } => "quota",
            Command::Recover { .. } => "recover",
            Command::Check { .. } => "check",
            Command::Bench(_) => "bench",
            Command::Mount(_) => "mount",
            Command::Umount(_) => "umount",
            Command::Crashtest(_) => "crashtest",
        }
    }
}

/// A preset argument: a preset name, optionally with technique settings (`cjfs+dispatch=per_core`).
pub(crate) fn preset_arg(s: &str) -> Result<String, String> {
    cjfs_fs::preset::resolve(s).map(|_| s.to_string()).map_err(|e| e.to_string())
}

fn run(cli: Cli) -> CliResult<()> {
    let command = cli.command.name();
    let data: DataMode = cli.data.parse().map_err(CliError::Usage)?;
    let options = cjfs_fs::preset::apply(&cli.journal, MountOptions { data, ..MountOptions::default() })
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let ctx = Ctx { options, command };
    let r = match cli.command {
        Command::Mkfs(a) => cmd::mkfs::run(&cmd::mkfs::MkfsRequest {
            image: a.image,
            size: a.size,
            block_size: a.block_size,
            label: a.label,
            journal_blocks: a.journal_blocks,
            log_areas: a.log_areas,
            ijournal_areas: a.ijournal_areas,
            inode_ratio: a.inode_ratio,
            force: a.force,
            metadata_csum: !a.no_metadata_csum,
        }),
        Command::Info { image } => cmd::info::run(&image, &ctx.options.journal),
        Command::Ls { image, path, long, all } => cmd::files::ls(&image, &ctx, path.as_bytes(), long, all),
        Command::Cat { image, path } => cmd::files::cat(&image, &ctx, path.as_bytes()),
        Command::Put { image, local, path } => cmd::files::put(&image, &ctx, &local, path.as_bytes()),
        Command::Get { image, path, local } => cmd::files::get(&image, &ctx, path.as_bytes(), &local),
        Command::Mkdir { image, path, parents } => cmd::files::mkdir(&image, &ctx, path.as_bytes(), parents),
        Command::Rm { image, path, recursive } => cmd::files::rm(&image, &ctx, path.as_bytes(), recursive),
        Command::Mv { image, from, to } => cmd::files::mv(&image, &ctx, from.as_bytes(), to.as_bytes()),
        Command::Ln { image, target, link, symbolic } => {
            cmd::files::ln(&image, &ctx, target.as_bytes(), link.as_bytes(), symbolic)
        }
        Command::Stat { image, path } => cmd::files::stat(&image, &ctx, path.as_bytes()),
        Command::Quota { image } => cmd::quota::run(&image, &ctx),
        Command::Recover { image } => cmd::recover::run(&image, &ctx),
        Command::Check { image, no_e2fsck } => cmd::check::run(&image, &ctx, !no_e2fsck),
        Command::Bench(a) => bench::run(a),
        Command::Mount(a) => mount::run(a, &ctx.options),
        Command::Umount(a) => mount::umount(a),
        Command::Crashtest(a) => crashtest::run(a, ctx.options.data),
    };
    r?;
    // Output still buffered (text without a final newline) must not fail unnoticed at exit.
    out::flush()
}

/// clap's multi-line usage error as one line: its message without the `error:` prefix and
/// the usage block, then where to look.
fn usage_line(rendered: &str) -> String {
    let msg: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:"))
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .collect();
    let mut joined = String::new();
    for l in msg {
        if !joined.is_empty() {
            joined.push_str(if joined.ends_with(':') { " " } else { "; " });
        }
        joined.push_str(l);
    }
    let msg = joined;
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    format!("{msg} (see `cjfs --help`)")
}

/// Flatten a message to one line.
fn one_line(s: &str) -> String {
    s.split(['\n', '\r']).map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

/// Keep freed heap memory in the process instead of returning it to the kernel at once:
/// block buffers and log writes are allocated and freed at every commit, and glibc's
/// defaults (trim above 128 KiB free at the top, `mmap` for 128 KiB and more) made each
/// commit fault its pages back in — host CPU on the fsync path, a real cost for the mount
/// daemon and one that skewed in-process benchmarks against whichever configuration
/// allocates more per commit.
fn keep_freed_memory() {
    // SAFETY: mallopt only changes allocator parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            // --help and --version print to stdout and succeed.
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                return match e.print() {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(_) => ExitCode::from(1),
                };
            }
            // Usage errors: one line like every other error, exit status 2.
            eprintln!("cjfs: usage: {}", usage_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    let command = cli.command.name();
    match run(cli) {
        Ok(()) | Err(CliError::StdoutClosed) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cjfs: {command}: {}", one_line(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_are_one_line() {
        let e = Cli::try_parse_from(["cjfs", "ls"]).unwrap_err();
        let l = usage_line(&e.render().to_string());
        assert!(!l.contains('\n'), "{l}");
        assert!(l.contains("<IMAGE>"), "{l}");
        assert!(!l.starts_with("error"), "{l}");
        let e = Cli::try_parse_from(["cjfs", "frobnicate"]).unwrap_err();
        assert!(usage_line(&e.render().to_string()).contains("frobnicate"));
    }

    #[test]
    fn one_line_flattens() {
        assert_eq!(one_line("a\nb\r\n\nc"), "a; b; c");
    }
}
