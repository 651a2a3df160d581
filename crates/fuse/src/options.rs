//! `-o` mount options: the file system's own (`data=`, `journal=`, `commit=`, caching) and
//! the generic ones `mount(8)` and fstab pass to a helper (`rw`, `nosuid`, `noauto`, ...).

use std::time::Duration;

use cjfs_fs::{AtimeUpdate, DataMode, MountOptions, preset};

use crate::error::{MountError, MountResult};

/// Default attribute and entry cache timeout.
pub const DEFAULT_TTL: Duration = Duration::from_secs(1);

/// Everything a mount is configured with, parsed from `-o a,b=c,...`.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// Mount read-only (nothing is written to the image, not even recovery).
    pub read_only: bool,
    /// Default data mode (`data=ordered|journal`).
    pub data: Option<DataMode>,
    /// Preset (`journal=PRESET`, a name [`preset::names`] knows); `None` keeps the caller's.
    pub preset: Option<String>,
    /// Commit interval (`commit=SECS`).
    pub commit: Option<Duration>,
    /// Buffer cache size in 4 KiB blocks (`cache_blocks=N`).
    pub cache_blocks: Option<usize>,
    /// Let other users access the mount (`allow_other`).
    pub allow_other: bool,
    /// Let root access the mount (`allow_root`).
    pub allow_root: bool,
    /// Kernel page cache in writeback mode (`writeback`; `nowriteback`, the default, writes
    /// through). Off by default: with it the kernel accepts `write` into its cache without
    /// asking the daemon, so a write past the free space is only refused when it is written
    /// back (ENOSPC at `fsync`/`close`, and lost for a program that checks neither).
    pub writeback_cache: bool,
    /// Attribute cache timeout (`attr_timeout=SECS`).
    pub attr_timeout: Duration,
    /// Directory entry cache timeout (`entry_timeout=SECS`).
    pub entry_timeout: Duration,
    /// Generic kernel mount flags that are passed on (`noatime`, `nosuid`, `dirsync`, ...).
    pub kernel_flags: Vec<String>,
    /// Source name shown in `/proc/mounts` (`fsname=`), the image path by default.
    pub fsname: Option<String>,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            read_only: false,
            data: None,
            preset: None,
            commit: None,
            cache_blocks: None,
            allow_other: false,
            allow_root: false,
            writeback_cache: false,
            attr_timeout: DEFAULT_TTL,
            entry_timeout: DEFAULT_TTL,
            kernel_flags: Vec::new(),
            fsname: None,
        }
    }
}

/// Options that only matter to `mount(8)`/fstab and are accepted and ignored.
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "nofail",
    "_netdev",
    "owner",
    "group",
    "default_permissions",
];

/// Generic flags handed to the kernel as they are.
const KERNEL_FLAGS: &[&str] = &[
    "atime",
    "noatime",
    "relatime",
    "norelatime",
    "strictatime",
    "nodiratime",
    "diratime",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "sync",
    "dirsync",
];

fn parse_secs(key: &str, v: &str) -> MountResult<Duration> {
    let secs: f64 =
        v.parse().map_err(|_| MountError::BadOption(format!("{key}={v}: expected a number of seconds")))?;
    if !(0.0..=86_400.0 * 365.0).contains(&secs) {
        return Err(MountError::BadOption(format!("{key}={v}: out of range")));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl MountConfig {
    /// Parse a comma-separated option list (several `-o` lists may be parsed into one
    /// config, later options win).
    pub fn parse_into(&mut self, list: &str) -> MountResult<()> {
        for opt in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (key, val) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            fn need<'a>(key: &str, v: Option<&'a str>) -> MountResult<&'a str> {
                v.filter(|v| !v.is_empty())
                    .ok_or_else(|| MountError::BadOption(format!("{key} needs a value ({key}=...)")))
            }
            match key {
                "ro" => self.read_only = true,
                "rw" => self.read_only = false,
                "data" => {
                    let v = need(key, val)?;
                    self.data =
                        Some(v.parse().map_err(|e: String| MountError::BadOption(format!("data={v}: {e}")))?);
                }
                "journal" => {
                    let v = need(key, val)?;
                    preset::resolve(v).map_err(|e| MountError::BadOption(format!("journal={v}: {e}")))?;
                    self.preset = Some(v.to_string());
                }
                "commit" => {
                    let d = parse_secs(key, need(key, val)?)?;
                    if d.is_zero() {
                        return Err(MountError::BadOption("commit=0: the interval must be positive".into()));
                    }
                    self.commit = Some(d);
                }
                "cache_blocks" => {
                    let v = need(key, val)?;
                    self.cache_blocks = Some(v.parse().map_err(|_| {
                        MountError::BadOption(format!("cache_blocks={v}: expected a number of 4 KiB blocks"))
                    })?);
                }
                "allow_other" => self.allow_other = true,
                "allow_root" => self.allow_root = true,
                "writeback" | "writeback_cache" => self.writeback_cache = true,
                "nowriteback" | "no_writeback_cache" => self.writeback_cache = false,
                "attr_timeout" => self.attr_timeout = parse_secs(key, need(key, val)?)?,
                "entry_timeout" => self.entry_timeout = parse_secs(key, need(key, val)?)?,
                "fsname" => self.fsname = Some(need(key, val)?.to_string()),
                "subtype" => {}
                // mount(8): a later `async` undoes `sync`.
                "async" if val.is_none() => self.kernel_flags.retain(|f| f != "sync"),
                k if IGNORED.contains(&k) || k.starts_with("x-") || k.starts_with("comment=") => {}
                k if KERNEL_FLAGS.contains(&k) => {
                    if val.is_some() {
                        return Err(MountError::BadOption(format!("{opt}: {k} takes no value")));
                    }
                    self.kernel_flags.push(k.to_string());
                }
                _ => {
                    return Err(MountError::BadOption(format!(
                        "unknown option {opt:?} (known: ro, rw, data=ordered|journal, journal=PRESET, \
                         commit=SECS, cache_blocks=N, allow_other, allow_root, writeback, nowriteback, \
                         attr_timeout=SECS, entry_timeout=SECS, fsname=NAME, and generic mount flags)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// How reads and directory listings that reach the daemon move access times: for files
    /// and for directories, from the generic flags in the order given (`noatime`,
    /// `strictatime`/`norelatime`, `relatime`/`atime`, `nodiratime`/`diratime`; relatime by
    /// default, as the kernel mounts).
    pub fn atime(&self) -> (AtimeUpdate, AtimeUpdate) {
        let (mut files, mut dirs_never) = (AtimeUpdate::Relative, false);
        for f in &self.kernel_flags {
            match f.as_str() {
                "noatime" => files = AtimeUpdate::Never,
                "strictatime" | "norelatime" => files = AtimeUpdate::Always,
                "relatime" | "atime" => files = AtimeUpdate::Relative,
                "nodiratime" => dirs_never = true,
                "diratime" => dirs_never = false,
                _ => {}
            }
        }
        (files, if dirs_never { AtimeUpdate::Never } else { files })
    }

    /// Parse one comma-separated option list.
    pub fn parse(list: &str) -> MountResult<MountConfig> {
        let mut c = MountConfig::default();
        c.parse_into(list)?;
        Ok(c)
    }

    /// The library's mount options: these settings over the caller's `defaults` (its preset
    /// and data mode).
    pub fn fs_options(&self, defaults: &MountOptions) -> MountResult<MountOptions> {
        let mut o = match &self.preset {
            Some(name) => preset::apply(name, defaults.clone())
                .map_err(|e| MountError::BadOption(format!("journal={name}: {e}")))?,
            None => defaults.clone(),
        };
        if let Some(c) = self.commit {
            o.journal.commit_interval = c;
        }
        if let Some(d) = self.data {
            o.data = d;
        }
        o.read_only = self.read_only;
        // The kernel never tells a FUSE daemon the mount's flags: directory operations,
        // truncates and attribute changes are the library's to make durable. (It syncs a
        // `sync` mount's file writes itself too, FUSE_FSYNC after each, which then finds
        // them durable.)
        o.sync = self.kernel_flags.iter().any(|f| f == "sync");
        o.dirsync = o.sync || self.kernel_flags.iter().any(|f| f == "dirsync");
        if let Some(n) = self.cache_blocks {
            o.cache_blocks = n;
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fs_options() {
        let c =
            MountConfig::parse("ro,data=journal,journal=jbd2,commit=2.5,allow_other,nowriteback").unwrap();
        assert!(c.read_only && c.allow_other && !c.writeback_cache);
        assert_eq!(c.data, Some(DataMode::Journal));
        assert_eq!(c.commit, Some(Duration::from_millis(2500)));
        let o = c.fs_options(&MountOptions::default()).unwrap();
        assert_eq!(o.journal.commit_interval, Duration::from_millis(2500));
        assert_eq!((o.journal.name.as_str(), o.data), ("jbd2", DataMode::Journal));
        assert!(o.read_only);
        let d = MountConfig::parse("rw").unwrap().fs_options(&MountOptions::default()).unwrap();
        assert_eq!((d.journal.name.as_str(), d.data), ("auto", DataMode::Ordered));
    }

    #[test]
    fn accepts_fstab_noise_and_passes_kernel_flags() {
        let c =
            MountConfig::parse("defaults,noauto,user,x-systemd.automount,noatime,nosuid,_netdev").unwrap();
        assert_eq!(c.kernel_flags, vec!["noatime".to_string(), "nosuid".to_string()]);
        // ext4's defaults over FUSE's nodev,nosuid.
        let c = MountConfig::parse("dev,suid").unwrap();
        assert_eq!(c.kernel_flags, vec!["dev".to_string(), "suid".to_string()]);
    }

    #[test]
    fn sync_and_dirsync_make_directory_operations_durable() {
        let d = |list: &str| {
            MountConfig::parse(list).unwrap().fs_options(&MountOptions::default()).unwrap().dirsync
        };
        assert!(!d("") && !d("noatime"));
        assert!(d("dirsync") && d("sync") && d("sync,noatime"));
        assert!(!d("sync,async") && d("async,sync") && d("dirsync,async"));
        let s =
            |list: &str| MountConfig::parse(list).unwrap().fs_options(&MountOptions::default()).unwrap().sync;
        assert!(s("sync") && !s("dirsync") && !s("sync,async"));
    }

    #[test]
    fn atime_flags_in_the_order_given() {
        use AtimeUpdate::*;
        let a = |list: &str| MountConfig::parse(list).unwrap().atime();
        assert_eq!(a(""), (Relative, Relative));
        assert_eq!(a("noatime"), (Never, Never));
        assert_eq!(a("strictatime"), (Always, Always));
        assert_eq!(a("noatime,relatime"), (Relative, Relative));
        assert_eq!(a("strictatime,nodiratime"), (Always, Never));
        assert_eq!(a("nodiratime,diratime"), (Relative, Relative));
    }

    #[test]
    fn rejects_bad_options() {
        for bad in ["data=fast", "journal=nope", "commit=0", "commit=x", "bogus", "data", "noatime=1"] {
            let e = MountConfig::parse(bad).unwrap_err();
            assert!(matches!(e, MountError::BadOption(_)), "{bad}: {e}");
            assert_eq!(e.exit_code(), 2);
        }
    }

    #[test]
    fn later_options_win() {
        let mut c = MountConfig::parse("ro").unwrap();
        c.parse_into("rw,writeback").unwrap();
        assert!(!c.read_only && c.writeback_cache);
    }

    #[test]
    fn writes_through_by_default() {
        assert!(!MountConfig::parse("rw").unwrap().writeback_cache);
        assert!(!MountConfig::default().writeback_cache);
    }
}
