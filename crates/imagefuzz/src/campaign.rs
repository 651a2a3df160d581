//! A run: make the seeds, judge them unmutated, then judge `images` mutated images on `jobs`
//! threads; or replay a corpus directory. Failures are written as JSON lines and their
//! images saved as they are found.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::corpus::{self, CorpusMeta};
use crate::error::{FuzzError, FuzzResult};
use crate::judge::{Case, ImageResult, JudgeEnv, judge_image};
use crate::layout::PathEntry;
use crate::mutate::{Structure, mutate};
use crate::report::{Header, Report, normalize};
use crate::run::{RunSpec, run};
use crate::seeds::{SeedEnv, make_seeds};

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Mutated images to judge.
    pub images: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// The `cjfs` binary.
    pub cjfs: PathBuf,
    /// Timeout of each command.
    pub timeout: Duration,
    /// Images judged in parallel.
    pub jobs: usize,
    /// FUSE mount workloads to run (spread over the images; root and `/dev/fuse` only).
    pub mounts: usize,
    /// Save failing images (and sidecars) here.
    pub save_failures: Option<PathBuf>,
    /// Save every judged image (and sidecar) here, failing or not (to pick corpus entries).
    pub save_all: Option<PathBuf>,
    /// Write JSON lines of failures (and a closing summary line) here.
    pub json: Option<PathBuf>,
    /// Count multi_line_error as a failure.
    pub strict: bool,
    /// Bytes of `cat` output read before the pipe is closed.
    pub cat_limit: u64,
    /// Print progress on stderr.
    pub progress: bool,
    /// Where the scratch directory goes (default: the system temp directory).
    pub work_dir: Option<PathBuf>,
    /// Keep the scratch directory (seeds, images of the last commands) after the run.
    pub keep_work: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            images: 300,
            seed: 1,
            cjfs: default_cjfs(),
            timeout: Duration::from_secs(20),
            jobs: 2,
            mounts: 0,
            save_failures: None,
            save_all: None,
            json: None,
            strict: false,
            cat_limit: 64 << 20,
            progress: true,
            work_dir: None,
            keep_work: false,
        }
    }
}

/// The `cjfs` next to the running executable (`target/<profile>/cjfs`; from a test binary
/// in `target/<profile>/deps`, one level up).
pub fn default_cjfs() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let here = dir.join("cjfs");
    if !here.is_file()
        && dir.file_name().is_some_and(|n| n == "deps")
        && let Some(up) = dir.parent()
    {
        return up.join("cjfs");
    }
    here
}

/// Find `name` on `PATH`, or in `/sbin`, `/usr/sbin` (where e2fsprogs lives).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin", "/bin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The external tools found, and notes on those missing.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    /// `e2fsck`.
    pub e2fsck: Option<PathBuf>,
    /// `mkfs.ext4`.
    pub mkfs_ext4: Option<PathBuf>,
    /// `fusermount3`, only when FUSE mounts are possible (root and `/dev/fuse`).
    pub fusermount: Option<PathBuf>,
    /// What is missing.
    pub notes: Vec<String>,
}

/// Look for the tools; `mounts`: FUSE mounts were asked for.
pub fn detect_tools(mounts: bool) -> Tools {
    let mut t = Tools { e2fsck: find_tool("e2fsck"), mkfs_ext4: find_tool("mkfs.ext4"), ..Tools::default() };
    if t.e2fsck.is_none() {
        t.notes.push(
            "e2fsck not installed: images are not classified clean/unclean, write_left_unclean is not judged"
                .into(),
        );
    }
    if mounts {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let fuse = Path::new("/dev/fuse").exists();
        let fm = find_tool("fusermount3");
        match (root, fuse, fm) {
            (true, true, Some(f)) => t.fusermount = Some(f),
            (root, fuse, fm) => t.notes.push(format!(
                "FUSE mounts skipped: {}",
                [(!root, "not root"), (!fuse, "no /dev/fuse"), (fm.is_none(), "no fusermount3")]
                    .iter()
                    .filter(|x| x.0)
                    .map(|x| x.1)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    t
}

fn machine() -> (usize, String) {
    let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    (nproc, kernel)
}

fn git_commit() -> Option<String> {
    let out =
        run(&RunSpec::new("git", ["rev-parse", "--short", "HEAD"]).timeout(Duration::from_secs(5))).ok()?;
    out.success().then(|| out.stdout_text().trim().to_string())
}

/// SplitMix64 of `seed` and `i`: the per-image random seed.
pub fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where failures go as they are found.
struct Sink {
    json: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
    save: Option<PathBuf>,
    save_all: Option<PathBuf>,
    seed: Option<u64>,
    strict: bool,
}

impl Sink {
    fn new(cfg: &Config, seed: Option<u64>) -> FuzzResult<Sink> {
        let json = match &cfg.json {
            Some(p) => {
                if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(d)
                        .map_err(|e| FuzzError::io(format!("mkdir {}", d.display()), e))?;
                }
                let f = std::fs::File::create(p)
                    .map_err(|e| FuzzError::io(format!("create {}", p.display()), e))?;
                Some(Mutex::new(std::io::BufWriter::new(f)))
            }
            None => None,
        };
        Ok(Sink {
            json,
            save: cfg.save_failures.clone(),
            save_all: cfg.save_all.clone(),
            seed,
            strict: cfg.strict,
        })
    }

    /// Save the image and write the JSON lines of `res`'s failures.
    fn handle(
        &self,
        res: &mut ImageResult,
        bytes: &[u8],
        paths: &[PathEntry],
        choice: u64,
    ) -> FuzzResult<()> {
        let failures: Vec<String> = res
            .failures(self.strict)
            .map(|r| format!("{}: {}: {}", r.command, r.outcome, normalize(r)))
            .collect();
        let name = match (self.seed, res.index) {
            (Some(s), Some(i)) => format!("seed{s}-img{i:05}"),
            (Some(s), None) => format!("seed{s}-{}", res.label.replace(' ', "-")),
            (None, _) => format!("replay-{}", res.label.replace(' ', "-")),
        };
        let meta = CorpusMeta {
            name,
            seed: self.seed,
            image_index: res.index,
            choice,
            seed_image: res.seed_name.clone(),
            structure: res.structure,
            mutations: res.mutations.clone(),
            paths: paths.to_vec(),
            failures: failures.clone(),
            note: String::new(),
        };
        if let Some(dir) = &self.save_all {
            corpus::save(dir, bytes, &meta)?;
        }
        if failures.is_empty() {
            return Ok(());
        }
        if let Some(dir) = &self.save {
            let p = corpus::save(dir, bytes, &meta)?;
            res.saved = Some(p.display().to_string());
        }
        if let Some(j) = &self.json {
            let mut w = j.lock().unwrap_or_else(|e| e.into_inner());
            for r in res.failures(self.strict) {
                let rec = crate::report::failure_record(self.seed, res, r);
                let line = serde_json::to_string(&rec)
                    .map_err(|e| FuzzError::Json { what: "encode a failure".into(), source: e })?;
                writeln!(w, "{line}").map_err(|e| FuzzError::io("write the JSON file", e))?;
            }
            w.flush().map_err(|e| FuzzError::io("write the JSON file", e))?;
        }
        Ok(())
    }

    fn finish(&self, report: &Report) -> FuzzResult<()> {
        if let Some(j) = &self.json {
            let mut w = j.lock().unwrap_or_else(|e| e.into_inner());
            writeln!(w, "{}", report.summary_json()).map_err(|e| FuzzError::io("write the JSON file", e))?;
            w.flush().map_err(|e| FuzzError::io("write the JSON file", e))?;
        }
        Ok(())
    }
}

/// Run `f` on `0..n` with `jobs` threads; `done` sees each result as it arrives (on the
/// calling thread). Stops at the first error.
fn par_for<R: Send>(
    n: usize,
    jobs: usize,
    f: impl Fn(usize) -> FuzzResult<R> + Sync,
    mut done: impl FnMut(R) -> FuzzResult<()>,
) -> FuzzResult<()> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<FuzzResult<R>>();
    std::thread::scope(|sc| {
        for _ in 0..jobs.max(1) {
            let tx = tx.clone();
            let (next, stop, f) = (&next, &stop, &f);
            sc.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let r = f(i);
                    let failed = r.is_err();
                    if tx.send(r).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut first_err = None;
        for r in rx {
            match r.and_then(&mut done) {
                Ok(()) => {}
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    })
}

fn scratch(cfg: &Config) -> FuzzResult<tempfile::TempDir> {
    let base = cfg.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix("cjfs-imagefuzz-")
        .tempdir_in(&base)
        .map_err(|e| FuzzError::io(format!("make a scratch directory in {}", base.display()), e))
}

fn header(cfg: &Config, tools: &Tools, seed: Option<u64>, mounts: usize) -> Header {
    let (nproc, kernel) = machine();
    Header {
        nproc,
        kernel,
        cjfs: cfg.cjfs.display().to_string(),
        commit: git_commit(),
        seed,
        images: cfg.images,
        seeds: Vec::new(),
        notes: tools.notes.clone(),
        timeout_secs: cfg.timeout.as_secs(),
        jobs: cfg.jobs,
        mounts,
        strict: cfg.strict,
        e2fsck: tools.e2fsck.is_some(),
    }
}

fn progress(cfg: &Config, done: usize, total: usize, failures: usize, start: Instant) {
    if cfg.progress && (done.is_multiple_of(25) || done == total) {
        eprintln!(
            "cjfs-imagefuzz: {done}/{total} images, {failures} failing runs, {:.0} s",
            start.elapsed().as_secs_f64()
        );
    }
}

/// Make the seeds, judge them, then judge `cfg.images` mutated images.
pub fn run_campaign(cfg: &Config) -> FuzzResult<Report> {
    if !cfg.cjfs.is_file() {
        return Err(FuzzError::NoCjfs(cfg.cjfs.clone()));
    }
    let start = Instant::now();
    let tools = detect_tools(cfg.mounts > 0);
    let tmp = scratch(cfg)?;
    let seeds = make_seeds(&SeedEnv {
        cjfs: cfg.cjfs.clone(),
        dir: tmp.path().join("seeds"),
        seed: cfg.seed,
        timeout: cfg.timeout,
        mkfs_ext4: tools.mkfs_ext4.clone(),
        e2fsck: tools.e2fsck.clone(),
    })?;
    let env = judge_env(cfg, &tools);
    let mounts = if env.fusermount.is_some() { cfg.mounts.min(cfg.images) } else { 0 };
    let step = cfg.images.checked_div(mounts).map_or(usize::MAX, |s| s.max(1));
    let mut head = header(cfg, &tools, Some(cfg.seed), mounts);
    head.seeds = seeds.seeds.iter().map(|s| format!("{} ({} paths)", s.name, s.paths.len())).collect();
    head.notes.extend(seeds.notes.iter().cloned());
    let sink = Sink::new(cfg, Some(cfg.seed))?;
    let mut results = Vec::new();

    for (k, s) in seeds.seeds.iter().enumerate() {
        let choice = mix(cfg.seed, (1 << 40) + k as u64);
        let case = Case {
            label: format!("seed {}", s.name),
            index: None,
            seed_name: s.name.clone(),
            bytes: &s.bytes,
            mutations: &[],
            structure: Structure::None,
            paths: &s.paths,
            choice,
            mount: mounts > 0,
        };
        let mut res = judge_image(&env, &case, &tmp.path().join(format!("seed-{}", s.name)))?;
        sink.handle(&mut res, &s.bytes, &s.paths, choice)?;
        results.push(res);
    }

    let failing = AtomicUsize::new(results.iter().map(|r| r.failures(cfg.strict).count()).sum());
    let done = AtomicUsize::new(0);
    let judge_one = |i: usize| -> FuzzResult<ImageResult> {
        let choice = mix(cfg.seed, i as u64);
        let mut rng = StdRng::seed_from_u64(choice);
        let seed = &seeds.seeds[i % seeds.seeds.len()];
        let m = mutate(seed, &mut rng);
        let case = Case {
            label: format!("image {i}"),
            index: Some(i),
            seed_name: seed.name.clone(),
            bytes: &m.bytes,
            mutations: &m.mutations,
            structure: m.structure(),
            paths: &seed.paths,
            choice,
            mount: i.is_multiple_of(step) && i / step < mounts,
        };
        let dir = tmp.path().join(format!("img-{i}"));
        let mut res = judge_image(&env, &case, &dir)?;
        sink.handle(&mut res, &m.bytes, &seed.paths, choice)?;
        let _ = std::fs::remove_dir_all(&dir);
        failing.fetch_add(res.failures(cfg.strict).count(), Ordering::Relaxed);
        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress(cfg, d, cfg.images, failing.load(Ordering::Relaxed), start);
        Ok(res)
    };
    let mut mutated = Vec::new();
    par_for(cfg.images, cfg.jobs, judge_one, |r| {
        mutated.push(r);
        Ok(())
    })?;
    mutated.sort_by_key(|r| r.index);
    results.extend(mutated);
    let report = Report { header: head, results, elapsed: start.elapsed() };
    sink.finish(&report)?;
    keep(cfg, tmp);
    Ok(report)
}

fn keep(cfg: &Config, tmp: tempfile::TempDir) {
    if cfg.keep_work {
        let p = tmp.keep();
        eprintln!("cjfs-imagefuzz: scratch directory kept: {}", p.display());
    }
}

/// What the judge needs from the configuration and the tools found.
fn judge_env(cfg: &Config, tools: &Tools) -> JudgeEnv {
    JudgeEnv {
        cjfs: cfg.cjfs.clone(),
        timeout: cfg.timeout,
        e2fsck: tools.e2fsck.clone(),
        cat_limit: cfg.cat_limit,
        fusermount: tools.fusermount.clone(),
    }
}

/// Judge every entry of the corpus directory `dir` with the commands it was saved with.
pub fn replay_corpus(cfg: &Config, dir: &Path) -> FuzzResult<Report> {
    if !cfg.cjfs.is_file() {
        return Err(FuzzError::NoCjfs(cfg.cjfs.clone()));
    }
    let start = Instant::now();
    let entries = corpus::load_dir(dir)?;
    let tools = detect_tools(cfg.mounts > 0);
    let tmp = scratch(cfg)?;
    let env = judge_env(cfg, &tools);
    let mounts = if env.fusermount.is_some() { cfg.mounts.min(entries.len()) } else { 0 };
    let mut head = header(cfg, &tools, None, mounts);
    head.images = entries.len();
    head.seeds = vec![format!("corpus {} ({} entries)", dir.display(), entries.len())];
    let sink = Sink::new(cfg, None)?;
    let done = AtomicUsize::new(0);
    let judge_one = |k: usize| -> FuzzResult<ImageResult> {
        let e = &entries[k];
        let case = Case {
            label: e.meta.name.clone(),
            index: e.meta.image_index,
            seed_name: e.meta.seed_image.clone(),
            bytes: &e.bytes,
            mutations: &e.meta.mutations,
            structure: e.meta.structure,
            paths: &e.meta.paths,
            choice: e.meta.choice,
            mount: k < mounts,
        };
        let d = tmp.path().join(format!("corpus-{k}"));
        let mut res = judge_image(&env, &case, &d)?;
        sink.handle(&mut res, &e.bytes, &e.meta.paths, e.meta.choice)?;
        let _ = std::fs::remove_dir_all(&d);
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress(cfg, n, entries.len(), 0, start);
        Ok(res)
    };
    let mut results: Vec<ImageResult> = Vec::new();
    par_for(entries.len(), cfg.jobs, judge_one, |r| {
        results.push(r);
        Ok(())
    })?;
    results.sort_by(|a, b| a.label.cmp(&b.label));
    let report = Report { header: head, results, elapsed: start.elapsed() };
    sink.finish(&report)?;
    keep(cfg, tmp);
    Ok(report)
}
