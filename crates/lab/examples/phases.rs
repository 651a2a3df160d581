//! Where the time of create + write + fsync goes (diagnostic).
use std::sync::Arc;
use std::time::Instant;
fn main() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let img = dir.path().join("p.img");
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).open(&img).unwrap();
    let z = vec![0u8; 1 << 20];
    for i in 0..512u64 { std::os::unix::fs::FileExt::write_all_at(&f, &z, i << 20).unwrap(); }
    f.sync_all().unwrap();
    let dev: cjfs_blockdev::Device = Arc::new(cjfs_blockdev::FileDevice::open(&img, Default::default()).unwrap());
    cjfs_fs::mkfs(&*dev, &Default::default()).unwrap();
    let fs = cjfs_fs::Fs::open(dev, Default::default()).unwrap();
    let (mut a, mut b) = (vec![], vec![]);
    let raw = std::fs::OpenOptions::new().read(true).write(true).create(true).open(dir.path().join("raw")).unwrap();
    for i in 0..4u64 { std::os::unix::fs::FileExt::write_all_at(&raw, &z, i << 20).unwrap(); }
    raw.sync_all().unwrap();
    let block = vec![1u8; 4096];
    for i in 0..400 {
        let s = Instant::now();
        let at = fs.create(2, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        fs.write(at.ino, 0, &block).unwrap();
        a.push(s.elapsed().as_micros());
        let s = Instant::now();
        fs.fsync(at.ino, false).unwrap();
        b.push(s.elapsed().as_micros());
        if std::env::var("RAW").is_ok() {
            std::os::unix::fs::FileExt::write_all_at(&raw, &block, i as u64 * 4096).unwrap();
            raw.sync_data().unwrap();
        }
    }
    let st = fs.journal().stats();
    a.sort(); b.sort();
    println!("create+write p50 {} us, fsync p50 {} us, commit mean {:.0} us, locked mean {:.0} us", a[200], b[200], st.commit_us_per_tx(), st.locked_us_per_tx());
    fs.unmount().unwrap();
}
