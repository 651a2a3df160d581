//! `cjfs mount IMAGE DIR`: serve an image through FUSE (the `cjfs-fuse` crate does the work).

use std::path::PathBuf;
use std::time::Duration;

use cjfs_fs::MountOptions;
use cjfs_fuse::{MountConfig, MountError, MountRequest};
use clap::Args;

use crate::error::{CliError, CliResult};

/// Arguments of `cjfs mount`.
#[derive(Debug, Args)]
#[command(after_help = "\
Options for -o (comma-separated, repeatable):
  ro | rw                     read-only (nothing written, not even recovery) or read-write
  data=ordered|journal        default data mode (per file: chattr +j or the xattr
                              user.cjfs.journal=data|ordered)
  journal=PRESET              journal preset (overrides --journal)
  commit=SECS                 journal commit interval
  cache_blocks=N              buffer cache size in 4 KiB blocks
  allow_other | allow_root    let other users (or root) use the mount
  nowriteback | writeback     kernel page cache write-through (default: a write past the
                              free space gets ENOSPC) or writeback (faster small writes;
                              ENOSPC then only at fsync/close)
  attr_timeout=SECS, entry_timeout=SECS   kernel cache timeouts (default 1)
  fsname=NAME                 source shown in /proc/mounts
  noatime, nosuid, nodev, noexec, ...   passed to the kernel
  dirsync                     directory operations durable when they return (as ext4;
                              per directory: chattr +D)
  sync                        that, and every write, truncate and attribute change
                              (per file: chattr +S)
  dev, suid                   allow device nodes and set-ID bits (FUSE mounts default to
                              nodev,nosuid; as root, `-o dev,suid` gives ext4's defaults)

Unmount with `cjfs umount DIR`: it returns once the daemon has committed and checkpointed
the journal, marked the image clean and released it. `fusermount3 -u DIR`, `umount DIR` or
SIGTERM/SIGINT to the daemon unmount too, but return before the daemon has finished writing
the image home: wait for the image's lock before using it (a kernel mount of it then would
replay a journal the daemon is still writing). The image is locked while mounted; a second
mount or a cjfs writer of it fails, and so does a mount of an image the kernel has mounted.")]
pub struct MountArgs {
    /// Image file or block device.
    pub image: PathBuf,
    /// Mount point (an existing directory).
    pub dir: PathBuf,
    /// Mount options, e.g. `-o ro,data=journal,commit=1,allow_other` (see below).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Stay in the foreground instead of detaching once the mount is ready.
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// FUSE worker threads (default: four per core, at least 16).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
}

/// Run `cjfs mount` with the global journal preset and data mode as defaults.
pub fn run(args: MountArgs, options: &MountOptions) -> CliResult<()> {
    let mut config = MountConfig::default();
    for o in &args.options {
        config.parse_into(o).map_err(to_cli)?;
    }
    let req = MountRequest {
        image: args.image,
        mountpoint: args.dir,
        config,
        options: options.clone(),
        foreground: args.foreground,
        threads: args.threads.map(usize::from),
    };
    cjfs_fuse::mount(&req).map_err(to_cli)
}

fn to_cli(e: MountError) -> CliError {
    match e.exit_code() {
        2 => CliError::Usage(e.to_string()),
        _ => CliError::Msg(e.to_string()),
    }
}

/// Arguments of `cjfs umount`.
#[derive(Debug, Args)]
pub struct UmountArgs {
    /// Mount point of a `cjfs mount`.
    pub dir: PathBuf,
    /// The image, when the mount's source is not its path (mounted with `-o fsname=`).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<PathBuf>,
    /// Seconds to wait for the daemon to write the image home and release it.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
    /// Detach a busy mount at once (`umount -l`) and wait until its open files close;
    /// without it a busy mount is an error and stays mounted.
    #[arg(long, short = 'l')]
    pub lazy: bool,
}

/// Run `cjfs umount`: unmount, then wait until the daemon released a clean image.
pub fn umount(args: UmountArgs) -> CliResult<()> {
    cjfs_fuse::unmount_and_wait(
        &args.dir,
        args.image.as_deref(),
        Duration::from_secs(args.timeout),
        args.lazy,
    )
    .map(|_| ())
    .map_err(to_cli)
}
