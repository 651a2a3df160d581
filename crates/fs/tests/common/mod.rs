//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cjfs_blockdev::{Device, FileDevice, FileDeviceOptions};
use cjfs_fs::{Fs, MkfsOptions, MountOptions, mkfs};

/// Whether a program is on PATH (or in /sbin).
pub fn have(prog: &str) -> bool {
    which(prog).is_some()
}

/// Full path of a program.
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':').chain(["/sbin", "/usr/sbin"]).map(|d| Path::new(d).join(prog)).find(|p| p.exists())
}

/// Make a fresh image file of `mib` MiB with our mkfs and return a device on it.
pub fn fresh_image(dir: &Path, name: &str, mib: u64) -> (PathBuf, Device) {
    let path = dir.join(name);
    let dev =
        FileDevice::open(&path, FileDeviceOptions { create_size: Some(mib << 20), ..Default::default() })
            .expect("create image");
    let dev: Device = Arc::new(dev);
    mkfs(&*dev, &MkfsOptions::default()).expect("mkfs");
    (path, dev)
}

/// Open a device on an existing image.
pub fn open_image(path: &Path) -> Device {
    Arc::new(FileDevice::open(path, FileDeviceOptions::default()).expect("open image"))
}

/// Mount with default options.
pub fn mount(dev: Device) -> Fs {
    Fs::open(dev, MountOptions::default()).expect("mount")
}

/// Run `e2fsck -fn` and assert it exits 0 (skips with a message if e2fsck is missing).
pub fn assert_fsck_clean(path: &Path) {
    let Some(e2fsck) = which("e2fsck") else {
        eprintln!("SKIP e2fsck check: e2fsck not installed");
        return;
    };
    let out = Command::new(e2fsck).arg("-fn").arg(path).output().expect("run e2fsck");
    assert!(
        out.status.success(),
        "e2fsck -fn {} failed ({}):\n{}\n{}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The whole content of file `ino`.
pub fn read_all(fs: &Fs, ino: cjfs_fs::Ino) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size as usize;
    let mut buf = vec![0u8; size + 1];
    let n = fs.read(ino, 0, &mut buf).expect("read");
    buf.truncate(n);
    buf
}

/// A kernel mount, unmounted on drop.
pub struct KernelMount(PathBuf);

impl Drop for KernelMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `mount -o loop img mnt` by the kernel (`mnt` made if missing), or None after printing why
/// when not root or the mount fails.
pub fn kernel_mount(img: &Path, mnt: &Path) -> Option<KernelMount> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|r| r.split_whitespace().nth(1));
    if uid != Some("0") {
        println!("SKIP: not root, cannot loop-mount");
        return None;
    }
    std::fs::create_dir_all(mnt).expect("mount point");
    let out = Command::new("mount").arg("-o").arg("loop").arg(img).arg(mnt).output().ok()?;
    if !out.status.success() {
        println!("SKIP: mount -o loop failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(KernelMount(mnt.to_path_buf()))
}

/// Set attribute `name` of `path` through the kernel.
pub fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    let n = std::ffi::CString::new(name).expect("name");
    // SAFETY: valid NUL-terminated strings and a buffer of the length given.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {name} on {}: {}", path.display(), std::io::Error::last_os_error());
}

/// Attribute `name` of `path` as the kernel reads it (up to the VFS's 64 KiB).
pub fn get_xattr(path: &Path, name: &str) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    let n = std::ffi::CString::new(name).expect("name");
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid NUL-terminated strings and a buffer of the length given.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "getxattr {name} on {}: {}", path.display(), std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf
}
