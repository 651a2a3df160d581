//! Saved images: failures of a run (`--save-failures DIR`) and the regression corpus
//! (`crates/imagefuzz/corpus/`), in one format that `--corpus DIR` replays.
//!
//! Each entry is two files: `NAME.img.gz` (the image, gzip-compressed: a 16 MiB image is
//! mostly zeros and patterned file contents, so it shrinks to tens of KiB) and `NAME.json`
//! ([`CorpusMeta`]: where it came from, what was mutated, the paths the commands use, and
//! the failures seen when it was saved).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use crate::error::{FuzzError, FuzzResult};
use crate::layout::PathEntry;
use crate::mutate::{Mutation, Structure};

/// Largest corpus file the repository keeps.
pub const MAX_ENTRY_BYTES: u64 = 200 * 1024;

/// The sidecar of a saved image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorpusMeta {
    /// Entry name (file stem).
    pub name: String,
    /// The run's seed, when it came from a run.
    pub seed: Option<u64>,
    /// Image index in that run (picks the writing command).
    pub image_index: Option<usize>,
    /// Seed of the choice of command arguments.
    pub choice: u64,
    /// The seed image it was made from.
    pub seed_image: String,
    /// The primary mutated structure.
    pub structure: Structure,
    /// What was changed.
    pub mutations: Vec<Mutation>,
    /// Paths of the unmutated image (the commands' arguments).
    pub paths: Vec<PathEntry>,
    /// The failures seen when it was saved (`command: outcome: first stderr line`).
    pub failures: Vec<String>,
    /// Free text: why it is in the corpus.
    pub note: String,
}

/// A loaded entry.
#[derive(Debug, Clone)]
pub struct CorpusEntry {
    /// Its sidecar.
    pub meta: CorpusMeta,
    /// The image.
    pub bytes: Vec<u8>,
    /// The `.img.gz` file.
    pub path: PathBuf,
}

/// Save `bytes` and `meta` as `dir/NAME.img.gz` and `dir/NAME.json`; returns the image path.
pub fn save(dir: &Path, bytes: &[u8], meta: &CorpusMeta) -> FuzzResult<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| FuzzError::io(format!("mkdir {}", dir.display()), e))?;
    let img = dir.join(format!("{}.img.gz", meta.name));
    let f = std::fs::File::create(&img).map_err(|e| FuzzError::io(format!("create {}", img.display()), e))?;
    let mut gz = GzEncoder::new(std::io::BufWriter::new(f), Compression::best());
    gz.write_all(bytes).map_err(|e| FuzzError::io(format!("write {}", img.display()), e))?;
    let mut w = gz.finish().map_err(|e| FuzzError::io(format!("write {}", img.display()), e))?;
    w.flush().map_err(|e| FuzzError::io(format!("write {}", img.display()), e))?;
    let json = dir.join(format!("{}.json", meta.name));
    let text = serde_json::to_string_pretty(meta)
        .map_err(|e| FuzzError::Json { what: format!("encode {}", json.display()), source: e })?;
    std::fs::write(&json, text + "\n").map_err(|e| FuzzError::io(format!("write {}", json.display()), e))?;
    Ok(img)
}

/// Load one entry from its `.img.gz` path.
pub fn load(img: &Path) -> FuzzResult<CorpusEntry> {
    let name =
        img.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".img.gz")).ok_or_else(
            || FuzzError::Corpus { path: img.to_path_buf(), msg: "not a NAME.img.gz file".into() },
        )?;
    let json = img.with_file_name(format!("{name}.json"));
    let text =
        std::fs::read_to_string(&json).map_err(|e| FuzzError::io(format!("read {}", json.display()), e))?;
    let meta: CorpusMeta = serde_json::from_str(&text)
        .map_err(|e| FuzzError::Json { what: format!("decode {}", json.display()), source: e })?;
    let f = std::fs::File::open(img).map_err(|e| FuzzError::io(format!("open {}", img.display()), e))?;
    let mut bytes = Vec::new();
    GzDecoder::new(std::io::BufReader::new(f))
        .read_to_end(&mut bytes)
        .map_err(|e| FuzzError::io(format!("decompress {}", img.display()), e))?;
    Ok(CorpusEntry { meta, bytes, path: img.to_path_buf() })
}

/// Every entry of `dir`, by name.
pub fn load_dir(dir: &Path) -> FuzzResult<Vec<CorpusEntry>> {
    let rd = std::fs::read_dir(dir).map_err(|e| FuzzError::io(format!("read {}", dir.display()), e))?;
    let mut imgs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(".img.gz")))
        .collect();
    imgs.sort();
    imgs.iter().map(|p| load(p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::PathKind;

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut bytes = vec![0u8; 1 << 20];
        bytes[5000] = 7;
        let meta = CorpusMeta {
            name: "t1".into(),
            seed: Some(3),
            image_index: Some(4),
            choice: 5,
            seed_image: "cjfs".into(),
            structure: Structure::Inode,
            mutations: vec![Mutation { structure: Structure::Inode, desc: "x".into() }],
            paths: vec![PathEntry { path: "/a".into(), kind: PathKind::File, size: 1, in_big_dir: false }],
            failures: vec![],
            note: String::new(),
        };
        let p = save(dir.path(), &bytes, &meta).expect("save");
        assert!(std::fs::metadata(&p).expect("stat").len() < 10_000);
        let all = load_dir(dir.path()).expect("load");
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].meta, meta);
        assert_eq!(all[0].bytes, bytes);
    }
}
