//! Formatting helpers: times, modes, UUIDs, inode flags, byte sizes.

use cjfs_fs::FileType;
use cjfs_fs::Timestamp;

/// `(year, month, day)` of the civil (proleptic Gregorian) date `days` after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn time_secs(sec: i64) -> String {
    let days = sec.div_euclid(86_400);
    let rem = sec.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem / 60 % 60, rem % 60)
}

/// A timestamp as `YYYY-MM-DD HH:MM:SS.nnnnnnnnn UTC (sec)`.
pub fn timestamp(t: Timestamp) -> String {
    let full = time_secs(t.sec);
    format!("{full}.{:09} UTC ({})", t.nsec, t.sec)
}

/// A superblock time: `-` when zero.
pub fn sb_time(sec: i64) -> String {
    if sec == 0 { "-".to_string() } else { format!("{} UTC", time_secs(sec)) }
}

/// The `ls -l` type character.
pub fn type_char(k: FileType) -> char {
    match k {
        FileType::Regular => '-',
        FileType::Directory => 'd',
        FileType::Symlink => 'l',
        FileType::Fifo => 'p',
        FileType::CharDev => 'c',
        FileType::BlockDev => 'b',
        FileType::Socket => 's',
    }
}

/// The major and minor numbers of a device number as [`cjfs_fs::Attr::rdev`] holds it
/// (Linux's `new_encode_dev` layout).
pub fn dev_numbers(rdev: u32) -> (u32, u32) {
    ((rdev & 0xfff00) >> 8, (rdev & 0xff) | ((rdev >> 12) & 0xfff00))
}

/// `rwxr-xr-x` style permission string (with setuid/setgid/sticky).
pub fn perm_string(perm: u16) -> String {
    let mut s = String::with_capacity(9);
    let bits = [(0o400, 'r'), (0o200, 'w'), (0o100, 'x'), (0o40, 'r'), (0o20, 'w'), (0o10, 'x')];
    for (b, c) in bits {
        s.push(if perm & b != 0 { c } else { '-' });
    }
    s.push(if perm & 0o4 != 0 { 'r' } else { '-' });
    s.push(if perm & 0o2 != 0 { 'w' } else { '-' });
    s.push(if perm & 0o1 != 0 { 'x' } else { '-' });
    let mut v: Vec<char> = s.chars().collect();
    let mark = |c: char, lower: char, upper: char| if c == 'x' { lower } else { upper };
    if perm & 0o4000 != 0 {
        v[2] = mark(v[2], 's', 'S');
    }
    if perm & 0o2000 != 0 {
        v[5] = mark(v[5], 's', 'S');
    }
    if perm & 0o1000 != 0 {
        v[8] = mark(v[8], 't', 'T');
    }
    v.into_iter().collect()
}

/// A UUID as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// Names of the set ext4 inode flags (`chattr` / `lsattr` vocabulary), unknown bits in hex.
pub fn inode_flag_names(flags: u32) -> Vec<String> {
    use cjfs_fs::ondisk::inode::*;
    let table: &[(u32, &str)] = &[
        (EXT4_SECRM_FL, "secrm"),
        (EXT4_UNRM_FL, "unrm"),
        (EXT4_COMPR_FL, "compr"),
        (EXT4_SYNC_FL, "sync"),
        (EXT4_IMMUTABLE_FL, "immutable"),
        (EXT4_APPEND_FL, "append"),
        (EXT4_NODUMP_FL, "nodump"),
        (EXT4_NOATIME_FL, "noatime"),
        (EXT4_DIRTY_FL, "dirty"),
        (EXT4_COMPRBLK_FL, "comprblk"),
        (EXT4_NOCOMPR_FL, "nocompr"),
        (EXT4_ENCRYPT_FL, "encrypt"),
        (EXT4_INDEX_FL, "index"),
        (EXT4_IMAGIC_FL, "imagic"),
        (EXT4_JOURNAL_DATA_FL, "journal_data"),
        (EXT4_NOTAIL_FL, "notail"),
        (EXT4_DIRSYNC_FL, "dirsync"),
        (EXT4_TOPDIR_FL, "topdir"),
        (EXT4_HUGE_FILE_FL, "huge_file"),
        (EXT4_EXTENTS_FL, "extents"),
        (EXT4_VERITY_FL, "verity"),
        (EXT4_EA_INODE_FL, "ea_inode"),
        (EXT4_DAX_FL, "dax"),
        (EXT4_INLINE_DATA_FL, "inline_data"),
        (EXT4_PROJINHERIT_FL, "projinherit"),
        (EXT4_CASEFOLD_FL, "casefold"),
        (EXT4_RESERVED_FL, "reserved"),
    ];
    let mut out = Vec::new();
    let mut rest = flags;
    for &(bit, name) in table {
        if flags & bit != 0 {
            out.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        out.push(format!("0x{rest:x}"));
    }
    out
}

/// Bytes in a human unit (`64.0 MiB`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

/// Write bytes (a name that may not be UTF-8) lossily for messages.
pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(time_secs(0), "1970-01-01 00:00:00");
        assert_eq!(time_secs(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(time_secs(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(time_secs(-1), "1969-12-31 23:59:59");
    }

    #[test]
    fn perms_and_uuid() {
        assert_eq!(perm_string(0o755), "rwxr-xr-x");
        assert_eq!(perm_string(0o4755), "rwsr-xr-x");
        assert_eq!(perm_string(0o1777), "rwxrwxrwt");
        assert_eq!(perm_string(0o2644), "rw-r-Sr--");
        let mut u = [0u8; 16];
        u[0] = 0xab;
        u[15] = 0x01;
        assert_eq!(uuid(&u), "ab000000-0000-0000-0000-000000000001");
        assert_eq!(inode_flag_names(0x80000 | 0x1000 | (1 << 26)), vec!["index", "extents", "0x4000000"]);
        assert_eq!(human_bytes(64 << 20), "64.0 MiB");
    }
}
