//! `cjfs-mount`: the mount helper. Same as `cjfs mount`, with the argument conventions of
//! `mount(8)` helpers, so that installed as `/sbin/mount.fuse.cjfs` (a symbolic link is
//! enough) `mount -t fuse.cjfs IMAGE DIR -o ...` and fstab lines such as
//!
//! ```text
//! /srv/mail.img  /srv/mail  fuse.cjfs  data=journal,commit=1,allow_other  0 0
//! ```
//!
//! work. Usage: `cjfs-mount IMAGE DIR [-o OPTIONS]... [--foreground] [--threads N]`; the
//! `-n`, `-s` and `-v` flags mount(8) may pass are accepted and ignored, `-f` ("fake")
//! exits without mounting, `-t TYPE` is ignored.

use std::process::ExitCode;

use cjfs_fuse::{MountConfig, MountError, MountRequest};

const USAGE: &str = "usage: cjfs-mount IMAGE DIR [-o OPTIONS]... [--foreground] [--threads N]\n\
    \n\
    Mount the ext4 image IMAGE at DIR through FUSE (see `cjfs mount --help` for OPTIONS:\n\
    ro, data=ordered|journal, journal=PRESET, commit=SECS, allow_other, nowriteback, ...).\n\
    The daemon detaches once the mount is ready unless --foreground is given.\n\
    Unmount with `fusermount3 -u DIR`, `umount DIR`, or SIGTERM/SIGINT to the daemon.";

enum Parsed {
    Mount(Box<MountRequest>),
    Exit(ExitCode),
}

fn parse(args: &[String]) -> Result<Parsed, MountError> {
    let mut positional = Vec::new();
    let mut config = MountConfig::default();
    let mut foreground = false;
    let mut threads = None;
    let mut fake = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(Parsed::Exit(ExitCode::SUCCESS));
            }
            "-o" => {
                let v = it.next().ok_or_else(|| MountError::BadOption("-o needs an option list".into()))?;
                config.parse_into(v)?;
            }
            s if s.starts_with("-o") && s.len() > 2 => config.parse_into(&s[2..])?,
            "--foreground" | "-F" => foreground = true,
            "--threads" => {
                let v = it.next().ok_or_else(|| MountError::BadOption("--threads needs a number".into()))?;
                threads = Some(parse_threads(v)?);
            }
            s if s.starts_with("--threads=") => threads = Some(parse_threads(&s["--threads=".len()..])?),
            "-t" => {
                it.next();
            }
            "-n" | "-s" | "-v" => {}
            "-f" => fake = true,
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(MountError::BadOption(format!("unknown argument {s:?}\n{USAGE}")));
            }
            _ => positional.push(a.clone()),
        }
    }
    let [image, dir] = positional.as_slice() else {
        return Err(MountError::BadOption(format!("expected IMAGE and DIR\n{USAGE}")));
    };
    if fake {
        return Ok(Parsed::Exit(ExitCode::SUCCESS));
    }
    let mut req = MountRequest::new(image, dir);
    req.config = config;
    req.foreground = foreground;
    req.threads = threads;
    Ok(Parsed::Mount(Box::new(req)))
}

fn parse_threads(v: &str) -> Result<usize, MountError> {
    match v.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(MountError::BadOption(format!("--threads {v}: expected 1..=1024"))),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = parse(&args).and_then(|p| match p {
        Parsed::Exit(c) => Ok(Some(c)),
        Parsed::Mount(req) => cjfs_fuse::mount(&req).map(|()| None),
    });
    match r {
        Ok(Some(c)) => c,
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cjfs-mount: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
