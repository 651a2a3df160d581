//! `cjfs quota`: the usage and limits the quota files record, per user, group and project
//! (as `repquota` shows them on a mounted file system). Opens the image read-only.

use cjfs_fs::QuotaKind;

use crate::error::{CliError, CliResult};
use crate::fmt::human_bytes;
use crate::image::Ctx;
use crate::image::with_ro;
use crate::out::outln;

/// A limit, or `-` for none.
fn limit(v: u64, bytes: bool) -> String {
    match (v, bytes) {
        (0, _) => "-".into(),
        (v, true) => human_bytes(v),
        (v, false) => v.to_string(),
    }
}

/// Run `cjfs quota`.
pub fn run(image: &str, ctx: &Ctx) -> CliResult<()> {
    with_ro(image, ctx, |fs| {
        let mut any = false;
        for kind in QuotaKind::ALL {
            let Some(entries) = fs.quota_report(kind).map_err(|e| CliError::fs(image, e))? else {
                continue;
            };
            any = true;
            outln!("{} quota: {} id(s)", kind.name(), entries.len());
            outln!(
                "{:>10}  {:>12}  {:>8}  {:>10}  {:>10}  {:>8}  {:>8}",
                "id",
                "used",
                "inodes",
                "soft",
                "hard",
                "isoft",
                "ihard"
            );
            for e in entries {
                outln!(
                    "{:>10}  {:>12}  {:>8}  {:>10}  {:>10}  {:>8}  {:>8}",
                    e.id,
                    human_bytes(e.bytes),
                    e.inodes,
                    limit(e.bytes_limits.0, true),
                    limit(e.bytes_limits.1, true),
                    limit(e.inodes_limits.0, false),
                    limit(e.inodes_limits.1, false)
                );
            }
        }
        if !any {
            outln!("no quota files (the quota feature is off)");
        }
        Ok(())
    })
}
