//! Synchronous updates as ext4 makes them: on a `dirsync` (or `sync`) mount, and in a
//! directory marked `chattr +D` or `+S`, a create, mkdir, mknod, symlink, link, unlink,
//! rmdir or rename is durable when it returns; `chattr +S` makes a file's writes and
//! truncates durable; new inodes inherit both flags as far as their kind carries them.
//!
//! Durability is judged on the image a power cut right after the call would leave: mkfs's
//! image plus every write the device completed before a flush that completed, recovered by
//! a fresh mount.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{BlockBuf, Device, EmulatedSsd, RecordedOp, Recorder, SsdPreset};
use cjfs_fs::ondisk::inode::{EXT4_DIRSYNC_FL, EXT4_SYNC_FL};
use cjfs_fs::{Fs, FsError, Ino, MkfsOptions, MountOptions, ROOT_INO, RenameFlags, SetAttr, mkfs, preset};

const BLOCKS: u64 = 8192;

/// One operation of a test sequence.
type Op = Box<dyn Fn(&Fs)>;
/// Paths (names from the root) a power cut right after it must show (`true`) or not.
type Want = Vec<(Vec<&'static [u8]>, bool)>;
const BS: usize = 4096;

struct Rig {
    /// The image mkfs left.
    base: Vec<u8>,
    rec: Arc<Recorder>,
    fs: Fs,
}

/// A file system on an emulated eMMC (a volatile cache) behind a recorder, mounted with
/// `spec`; no timer commits, so only what the calls commit reaches the log.
fn rig(spec: &str, dirsync: bool, sync: bool) -> Rig {
    let ssd =
        EmulatedSsd::new(SsdPreset { write_latency_us: 0, flush_base_us: 0, ..SsdPreset::emmc() }, BLOCKS);
    mkfs(&ssd, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() }).expect("mkfs");
    let base = ssd.image_bytes();
    let rec = Arc::new(Recorder::new(Arc::new(ssd) as Device));
    let mut opts =
        preset::apply(spec, MountOptions { dirsync, sync, ..MountOptions::default() }).expect("preset");
    opts.journal.commit_interval = Duration::from_secs(3600);
    let fs = Fs::open(rec.clone() as Device, opts).expect("mount");
    Rig { base, rec, fs }
}

impl Rig {
    /// Mount (and so recover) the image a power cut now would leave.
    fn cut(&self) -> Fs {
        let mut img = self.base.clone();
        let mut writes: HashMap<u64, (u64, Vec<BlockBuf>, bool)> = HashMap::new();
        // Completed writes not yet covered by a flush, and what each flush start saw.
        let mut done: Vec<u64> = Vec::new();
        let mut at_start: HashMap<u64, Vec<u64>> = HashMap::new();
        let apply = |img: &mut Vec<u8>, block: u64, bufs: &[BlockBuf]| {
            for (i, b) in bufs.iter().enumerate() {
                let at = (block as usize + i) * BS;
                img[at..at + BS].copy_from_slice(b);
            }
        };
        for op in self.rec.log_snapshot().iter() {
            match op {
                RecordedOp::Write { seq, block, bufs, fua, .. } => {
                    writes.insert(*seq, (*block, bufs.clone(), *fua));
                }
                RecordedOp::WriteDone { write_seq, ok: true, .. } => {
                    let (block, bufs, fua) = &writes[write_seq];
                    // A forced-unit-access write is durable once done.
                    if *fua {
                        apply(&mut img, *block, bufs);
                    } else {
                        done.push(*write_seq);
                    }
                }
                RecordedOp::FlushStart { seq } => {
                    at_start.insert(*seq, done.clone());
                }
                RecordedOp::Flush { start: Some(s), ok: true, .. } => {
                    let mut covered = at_start.remove(s).unwrap_or_default();
                    covered.sort_unstable();
                    for w in &covered {
                        let (block, bufs, _) = &writes[w];
                        apply(&mut img, *block, bufs);
                    }
                    done.retain(|w| !covered.contains(w));
                }
                _ => {}
            }
        }
        let dev: Device = Arc::new(EmulatedSsd::from_image(SsdPreset::ramdisk(), &img));
        Fs::open(dev, preset::resolve("jbd2").expect("jbd2")).expect("recover the cut image")
    }
}

/// Whether `path` (names from the root) exists in `fs`.
fn exists(fs: &Fs, path: &[&[u8]]) -> bool {
    let mut at: Ino = ROOT_INO;
    for name in path {
        match fs.lookup(at, name) {
            Ok(a) => at = a.ino,
            Err(FsError::NotFound(_)) => return false,
            Err(e) => panic!("lookup {:?}: {e}", String::from_utf8_lossy(name)),
        }
    }
    true
}

/// A directory (`dir`) or an empty file in the root, with the inode `flags` set.
fn made(fs: &Fs, name: &[u8], dir: bool, flags: u32) -> Ino {
    let a = if dir { fs.mkdir(ROOT_INO, name, 0o755, 0, 0) } else { fs.create(ROOT_INO, name, 0o644, 0, 0) };
    let ino = a.expect("make").ino;
    if flags != 0 {
        fs.set_flags(ino, flags, flags).expect("chattr");
    }
    ino
}

#[test]
fn a_dirsync_mount_makes_every_directory_operation_durable() {
    for spec in ["jbd2", "cjfs", "adaptive", "nojournal"] {
        let r = rig(spec, true, false);
        let fs = &r.fs;
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir").ino;
        fs.mkdir(d, b"x", 0o755, 0, 0).expect("mkdir x");
        let checks: Vec<(&str, Op, Want)> = vec![
            ("mkdir", Box::new(|_| {}), vec![(vec![b"d"], true), (vec![b"d", b"x"], true)]),
            (
                "create",
                Box::new(move |fs| {
                    fs.create(d, b"f", 0o644, 0, 0).expect("create");
                }),
                vec![(vec![b"d", b"f"], true)],
            ),
            (
                "symlink",
                Box::new(move |fs| {
                    fs.symlink(d, b"s", b"f", 0, 0).expect("symlink");
                }),
                vec![(vec![b"d", b"s"], true)],
            ),
            (
                "mknod",
                Box::new(move |fs| {
                    fs.mknod(d, b"p", 0o010644, 0, 0, 0).expect("mknod");
                }),
                vec![(vec![b"d", b"p"], true)],
            ),
            (
                "link",
                Box::new(move |fs| {
                    let f = fs.lookup(d, b"f").expect("f").ino;
                    fs.link(f, ROOT_INO, b"l").expect("link");
                }),
                vec![(vec![b"l"], true)],
            ),
            (
                "rename in a directory",
                Box::new(move |fs| fs.rename(d, b"f", d, b"g", RenameFlags::default()).expect("rename")),
                vec![(vec![b"d", b"f"], false), (vec![b"d", b"g"], true)],
            ),
            (
                "rename across directories",
                Box::new(move |fs| {
                    fs.rename(d, b"g", ROOT_INO, b"h", RenameFlags::default()).expect("rename")
                }),
                vec![(vec![b"d", b"g"], false), (vec![b"h"], true)],
            ),
            ("unlink", Box::new(|fs| fs.unlink(ROOT_INO, b"l").expect("unlink")), vec![(vec![b"l"], false)]),
            ("rmdir", Box::new(move |fs| fs.rmdir(d, b"x").expect("rmdir")), vec![(vec![b"d", b"x"], false)]),
        ];
        for (what, op, want) in &checks {
            op(fs);
            let cut = r.cut();
            for (path, there) in want {
                assert_eq!(exists(&cut, path), *there, "{spec}: after {what}, {path:?} in the cut image");
            }
            drop(cut);
        }
        r.fs.unmount().expect("unmount");
    }
}

/// The control: without the option and the flags, a directory operation is not durable
/// when it returns (the commit timer or an fsync makes it so), and a power cut loses it.
#[test]
fn without_dirsync_a_directory_operation_waits_for_a_commit() {
    let r = rig("jbd2", false, false);
    r.fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).expect("mkdir");
    assert!(!exists(&r.cut(), &[b"d"]), "a plain mkdir was durable at once");
    r.fs.fsync(ROOT_INO, false).expect("fsync the directory");
    assert!(exists(&r.cut(), &[b"d"]), "fsync of the directory made it durable");
    r.fs.unmount().expect("unmount");
}

#[test]
fn chattr_d_and_s_make_one_directory_synchronous_and_pass_to_its_subdirectories() {
    let r = rig("jbd2", false, false);
    let fs = &r.fs;
    let plain = made(fs, b"plain", true, 0);
    let dsync = made(fs, b"dsync", true, EXT4_DIRSYNC_FL);
    let ssync = made(fs, b"ssync", true, EXT4_SYNC_FL);
    fs.sync().expect("sync");
    fs.create(plain, b"a", 0o644, 0, 0).expect("create");
    assert!(!exists(&r.cut(), &[b"plain", b"a"]), "a create in a plain directory was durable at once");
    let f = fs.create(dsync, b"b", 0o644, 0, 0).expect("create");
    assert!(exists(&r.cut(), &[b"dsync", b"b"]), "a create in a +D directory is durable");
    // ext4_mask_flags: a regular file takes +S from its directory but not +D, which it
    // cannot carry (and `chattr +D` on it changes nothing).
    assert_eq!(f.flags & (EXT4_DIRSYNC_FL | EXT4_SYNC_FL), 0);
    assert_eq!(
        fs.set_flags(f.ino, EXT4_DIRSYNC_FL, EXT4_DIRSYNC_FL).expect("chattr +D file").flags
            & EXT4_DIRSYNC_FL,
        0
    );
    let sub = fs.mkdir(dsync, b"sub", 0o755, 0, 0).expect("mkdir");
    assert_ne!(sub.flags & EXT4_DIRSYNC_FL, 0, "a subdirectory inherits +D");
    fs.rename(plain, b"a", sub.ino, b"moved", RenameFlags::default()).expect("rename into it");
    let cut = r.cut();
    assert!(exists(&cut, &[b"dsync", b"sub", b"moved"]) && !exists(&cut, &[b"plain", b"a"]));
    drop(cut);
    let g = fs.create(ssync, b"c", 0o644, 0, 0).expect("create");
    assert!(exists(&r.cut(), &[b"ssync", b"c"]), "a create in a +S directory is durable");
    assert_ne!(g.flags & EXT4_SYNC_FL, 0, "a file made in a +S directory is +S");
    fs.set_flags(dsync, EXT4_DIRSYNC_FL, 0).expect("chattr -D");
    fs.create(dsync, b"late", 0o644, 0, 0).expect("create");
    assert!(!exists(&r.cut(), &[b"dsync", b"late"]), "chattr -D makes the directory asynchronous again");
    r.fs.unmount().expect("unmount");
}

#[test]
fn chattr_s_and_a_sync_mount_make_writes_and_truncates_of_a_file_durable() {
    for sync_mount in [false, true] {
        let r = rig("jbd2", false, sync_mount);
        let fs = &r.fs;
        let s = made(fs, b"s", false, if sync_mount { 0 } else { EXT4_SYNC_FL });
        // A plain file (none is, on a `sync` mount), written after the synchronous write,
        // which would have committed it too.
        let p = (!sync_mount).then(|| made(fs, b"p", false, 0));
        fs.sync().expect("sync");
        fs.write(s, 0, b"synchronous").expect("write");
        if let Some(p) = p {
            fs.write(p, 0, b"plain").expect("write");
        }
        let read = |fs: &Fs, name: &[u8]| {
            let a = fs.lookup(ROOT_INO, name).expect("lookup");
            let mut buf = vec![0u8; a.size as usize];
            let n = fs.read(a.ino, 0, &mut buf).expect("read");
            buf.truncate(n);
            buf
        };
        let cut = r.cut();
        assert_eq!(
            read(&cut, b"s"),
            b"synchronous",
            "sync mount {sync_mount}: a write is durable when it returns"
        );
        if !sync_mount {
            assert_eq!(read(&cut, b"p"), b"", "a plain write waits for a commit");
        }
        drop(cut);
        fs.setattr(s, &SetAttr { size: Some(5), ..SetAttr::default() }).expect("truncate");
        assert_eq!(read(&r.cut(), b"s"), b"synch", "sync mount {sync_mount}: a truncate is durable");
        r.fs.unmount().expect("unmount");
    }
}
