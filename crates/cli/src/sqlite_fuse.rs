//! The SQLite matrix through `cjfs mount` (FUSE): for every repetition and configuration a
//! fresh image file is made, mounted by this program's `mount` command with the
//! configuration's preset and data mode, the rounds run with SQLite's own unix VFS on the
//! mount, and the image unmounted (its daemon gone before the next one).
//!
//! With emulated devices ([`run_emulated`]) this process serves each mount itself
//! ([`cjfs_fuse::serve_in_process`]) from a fresh in-memory image on the device preset: the
//! FUSE crossing and SQLite's own VFS stay, and the host disk's flush swings go, so the
//! journal's effect through FUSE can be told from the noise.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cjfs_blockdev::{Device, EmulatedSsd, FileDevice, FileDeviceOptions, SsdPreset};
use cjfs_fs::{DataMode, Fs, MkfsOptions, MountOptions, mkfs, preset};
use cjfs_lab::sqlite::{IMAGE_MIB, MatrixSpec, Row, run_dir_rounds};

use crate::error::{CliError, CliResult};

/// Run `spec`'s configurations through FUSE mounts of image files in `dir`.
pub fn run(dir: &Path, spec: &MatrixSpec, progress: &mut dyn FnMut(&str)) -> CliResult<Vec<Row>> {
    let io = |path: &Path| {
        let p = path.display().to_string();
        move |source| CliError::Io { path: p.clone(), source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let img = dir.join("sqlite-fuse.img");
    let mnt = dir.join("sqlite-fuse-mnt");
    std::fs::create_dir_all(&mnt).map_err(io(&mnt))?;
    let exe = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
    let mut rows = Vec::new();
    for rep in 0..spec.reps {
        for cfg in &spec.configs {
            let _ = std::fs::remove_file(&img);
            {
                let opts = FileDeviceOptions { create_size: Some(IMAGE_MIB << 20), ..Default::default() };
                let dev: Device = Arc::new(
                    FileDevice::open(&img, opts)
                        .map_err(|e| CliError::Msg(format!("{}: {e}", img.display())))?,
                );
                mkfs(&*dev, &MkfsOptions::default()).map_err(|e| CliError::Msg(format!("mkfs: {e}")))?;
            }
            let data = match cfg.data {
                DataMode::Ordered => "ordered",
                DataMode::Journal => "journal",
            };
            let st = std::process::Command::new(&exe)
                .arg("mount")
                .arg(&img)
                .arg(&mnt)
                .arg("-o")
                // The kernel's writeback cache, as the matrix in docs/results/joj/fuse was measured
                // (the mount's default became write-through later, for ENOSPC at write()).
                .arg(format!("journal={},data={data},writeback", cfg.preset))
                .status()
                .map_err(io(&exe))?;
            if !st.success() {
                return Err(CliError::Msg(format!("cjfs mount for {} failed ({st})", cfg.label)));
            }
            let r = run_dir_rounds(&mnt, spec, cfg, "fuse-image-file", rep, progress);
            unmount_and_wait(&mnt, &img)?;
            rows.extend(r.map_err(|e| CliError::Msg(e.to_string()))?);
        }
    }
    let _ = std::fs::remove_file(&img);
    Ok(rows)
}

/// Run `spec`'s configurations through FUSE mounts that this process serves from fresh
/// in-memory images on each of `spec.devices` (emulated presets), mounted in `dir`; rows are
/// labelled `fuse-<preset>`.
pub fn run_emulated(dir: &Path, spec: &MatrixSpec, progress: &mut dyn FnMut(&str)) -> CliResult<Vec<Row>> {
    let mnt = dir.join("sqlite-fuse-mnt");
    std::fs::create_dir_all(&mnt)
        .map_err(|source| CliError::Io { path: mnt.display().to_string(), source })?;
    let mut rows = Vec::new();
    for name in &spec.devices {
        let dev_preset = SsdPreset::by_name(name.trim_start_matches("fuse-"))
            .ok_or_else(|| CliError::Msg(format!("unknown device preset {name:?}")))?;
        let label = format!("fuse-{}", dev_preset.name);
        for rep in 0..spec.reps {
            for cfg in &spec.configs {
                let ssd = Arc::new(EmulatedSsd::new(dev_preset, (IMAGE_MIB << 20) / 4096));
                let fail = |e: &dyn std::fmt::Display| CliError::Msg(format!("{label} {}: {e}", cfg.label));
                mkfs(&*ssd, &MkfsOptions { assume_zeroed: true, ..MkfsOptions::default() })
                    .map_err(|e| fail(&e))?;
                let opts =
                    preset::apply(&cfg.preset, MountOptions { data: cfg.data, ..MountOptions::default() })
                        .map_err(|e| fail(&e))?;
                let dev: Device = ssd.clone();
                let fs = Fs::open(dev, opts).map_err(|e| fail(&e))?;
                // The kernel's writeback cache, as the image-file rounds mount.
                let fuse_cfg = cjfs_fuse::MountConfig { writeback_cache: true, ..Default::default() };
                let served =
                    cjfs_fuse::serve_in_process(fs, &mnt, &fuse_cfg, &label, cjfs_fuse::default_threads())
                        .map_err(|e| CliError::Msg(format!("serving {label} at {}: {e}", mnt.display())))?;
                let r = run_dir_rounds(&mnt, spec, cfg, &label, rep, progress);
                served.unmount().map_err(|e| CliError::Msg(format!("unmount {}: {e}", mnt.display())))?;
                rows.extend(r.map_err(|e| CliError::Msg(e.to_string()))?);
            }
        }
    }
    Ok(rows)
}

/// Unmount `mnt` and wait until the daemon released `img` clean.
fn unmount_and_wait(mnt: &Path, img: &Path) -> CliResult<()> {
    cjfs_fuse::unmount_and_wait(mnt, Some(img), Duration::from_secs(120), true)
        .map(|_| ())
        .map_err(|e| CliError::Msg(format!("unmount {}: {e}", mnt.display())))
}
