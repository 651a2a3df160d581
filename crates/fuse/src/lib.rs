//! FUSE front end of cjfs: `cjfs mount IMG DIR` serves an ext4 image through the kernel, so
//! ordinary programs (databases, mail servers, git, compilers, test suites) use it like any
//! other file system, with cjfs's journal keeping their data safe across a crash.
//!
//! * [`daemon::mount`] does the whole job: checks, daemonizing, the image lock, recovery,
//!   the FUSE session, a clean unmount (commit, checkpoint, image marked clean) on
//!   `fusermount3 -u`, `umount`, SIGINT, SIGTERM or SIGHUP.
//! * [`CjfsFuse`] maps every FUSE request onto one library operation; a lookup table keeps the
//!   kernel's inode references (the lookup/forget protocol, module `lookups`), so an unlinked file stays usable
//!   while the kernel still holds it and sits on the on-disk orphan list meanwhile.
//! * [`MountConfig`] parses `-o` options.
//! * [`serve_in_process`] serves an already open [`cjfs_fs::Fs`] from a thread of the calling
//!   process (no daemon, no image lock): the lab's SQLite rounds through FUSE on emulated
//!   devices.
//!
//! The session is multithreaded: fuser's `n_threads` workers, each reading its own cloned
//! `/dev/fuse` descriptor (`clone_fd`), by default four per core and at least 16 (a worker
//! blocks for a whole fsync, so more workers than cores let concurrent fsyncs share one
//! journal commit). fuser mounts without libfuse: the `mount` system call as root, the
//! `fusermount3` helper otherwise.
//!
//! # Caching, and why it keeps fsync semantics
//!
//! * **Write-through by default; writeback cache with `-o writeback`.** Writing through, the
//!   kernel sends every `write` to the daemon before returning (its page cache still keeps
//!   the pages for reads), and the library allocates the blocks there and then, so a write
//!   past the free space is refused by that `write` — a short count for what fitted, then
//!   ENOSPC — the file's size covers only accepted bytes, and an accepted write never fails
//!   later for lack of space. With the writeback cache the kernel accepts writes into its
//!   cache without asking the daemon (FUSE has no way to reserve space at that point), so
//!   such a write is only refused when the kernel writes it back: the error reaches the
//!   next `fsync` (or `close` when no fsync consumed it) and the data is lost for a program
//!   that checks neither. Either way `fsync`/`fdatasync` first write back and wait for every
//!   dirty page of the file, then send FUSE_FSYNC, which commits (and flushes) cjfs's
//!   journal before replying: a returned fsync means durable, exactly as on ext4.
//!   Writes through a shared writable `mmap` are always written back later (the kernel does
//!   not ask the daemon at page fault time), so ENOSPC for them shows at `msync`/`fsync`.
//!   `O_SYNC`/`O_DSYNC` writes are synced before `write` returns.
//! * **Attribute and entry timeouts of 1 s** (`-o attr_timeout=`, `entry_timeout=`), and
//!   negative entries cached for the entry timeout. The daemon is the image's only user
//!   (the image is locked) and every change goes through the kernel, which invalidates its
//!   own caches as it makes them, so longer timeouts would also be safe; 1 s keeps `stat`
//!   output fresh if the image is ever changed underneath.
//! * **`FOPEN_KEEP_CACHE`**: cached pages survive close and reopen, for the same reason.
//! * **Big requests**: `max_write` and `max_readahead` of 1 MiB (with `FUSE_MAX_PAGES`),
//!   64 background requests, parallel directory operations (`FUSE_PARALLEL_DIROPS`: lookups
//!   and readdirs in one directory run concurrently; the library has per-inode locks),
//!   readdirplus, cached symlinks.
//! * **`FUSE_HANDLE_KILLPRIV_V2`**: the daemon clears set-user/group-ID bits on write,
//!   truncate and chown, so the kernel only asks for `security.capability` before the first
//!   write to an inode, not before every write.
//! * **No FLUSH round trip**: FLUSH is answered ENOSYS once (nothing is buffered in the
//!   daemon), so the kernel stops sending it on every `close`; it still writes the file's
//!   dirty pages back at `close` and reports their errors there.
//!
//! Measured choices (varmail-shared, interleaved runs on the development machine): the
//! writeback cache was as fast or faster than write-through at 1–32 threads (up to 2× at 1
//! thread, where every `write` is a round trip; `dd bs=4k` of 64 MiB with fsync: 0.4–1.0 s
//! against 2.1–2.6 s, equal at 1 MiB writes), which is what `-o writeback` trades for
//! ENOSPC at write time; 16, 32 and 64 worker threads were within noise of each other at
//! 1–32 client threads.
//!
//! Permissions are checked by the kernel (`default_permissions`) from the attributes the
//! daemon returns and, with `FUSE_POSIX_ACL`, from the POSIX ACLs it reads back through
//! `getxattr`; `access` is still answered for completeness. ACLs are stored in ext4's format
//! and kept consistent with the mode (`cjfs_fs::acl`). With `FUSE_DONT_MASK` the kernel
//! passes the caller's umask instead of applying it, and a new file or directory in a
//! directory with a default ACL inherits that ACL and ignores the umask, as on ext4
//! (`cjfs_fs::Fs::mknod_umask`).
//!
//! # Per-file data journalling
//!
//! `chattr +j FILE` (the kernel passes FS_IOC_SETFLAGS to the daemon) and
//! `setfattr -n user.cjfs.journal -v data|ordered FILE` (works everywhere) switch a file
//! between data journalling and ordered mode; `getfattr -n user.cjfs.journal` and `lsattr`
//! show the mode. The attribute is virtual: it is not stored or listed.

mod convert;
pub mod daemon;
pub mod error;
pub mod filesystem;
mod lookups;
pub mod options;

pub use daemon::{
    InProcessMount, MountRequest, default_threads, mount, mount_source, serve_in_process, unmount_and_wait,
    unmount_dir, unmount_dir_with,
};
pub use error::{MountError, MountResult};
pub use filesystem::{CjfsFuse, JOURNAL_XATTR, MAX_WRITE};
pub use options::MountConfig;
