//! Run the smoke benchmark: `cargo run --release -p cjfs-lab --example smoke [DIR]`.
fn main() {
    let dir = std::env::args().nth(1).map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let cfg = cjfs_lab::smoke::SmokeConfig {
        dir,
        iterations: 500,
        threads: 16,
        duration: std::time::Duration::from_secs(5),
        seed: 1,
        journal: cjfs_journal::JournalConfig::jbd2(),
    };
    match cjfs_lab::smoke::run(&cfg) {
        Ok(r) => cjfs_lab::smoke::print(&r, &cfg),
        Err(e) => {
            eprintln!("smoke: {e}");
            std::process::exit(1);
        }
    }
}
