//! `cjfs mount IMAGE DIR`: serve an image through FUSE (the `cjfs-fuse` crate does the work).

use std::path::PathBuf;

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
  noatime, nosuid, nodev, noexec, sync, dirsync, ...   passed to the kernel

Unmount with `fusermount3 -u DIR` (or `umount DIR`, or SIGTERM/SIGINT to the daemon): the
journal is committed and checkpointed and the image marked clean. The image is locked while
mounted; a second mount of it fails.")]
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
