//! An exim-like mail server (the MOSBENCH exim workload of the XFS journaling paper): every
//! thread delivers messages, one operation per message.
//!
//! A delivery, as exim does it: write the message's data file (`ID-D`) into the spool
//! directory every thread shares and fsync it; write its header file as `ID-H.tmp`, fsync,
//! rename it to `ID-H` (the spool entry is complete); append the message to the recipient's
//! mailbox (one of [`USERS`] per-user files, appends to one mailbox serialised as exim's
//! lock file does) and fsync it; append a line to the shared main log (no fsync, as exim);
//! unlink both spool files. Sizes: data gamma-distributed around 4 KiB, header 512 bytes,
//! log line 96 bytes. Throughput is messages per second.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use rand::Rng;
use rand_distr::{Distribution, Gamma};

use super::{Params, RunResult, data_pool, run_workers};
use crate::target::Target;

/// Recipients, each with a mailbox file.
pub const USERS: usize = 1000;
/// Mean message size.
const MEAN_MESSAGE: f64 = 4096.0;
/// Spool header file size.
const HEADER: usize = 512;
/// Main log line size.
const LOG_LINE: usize = 96;

/// Create the spool and mailbox directories, the mailboxes and the main log.
pub fn setup(t: &dyn Target) -> io::Result<()> {
    for d in ["exim", "exim/input", "exim/mail", "exim/log"] {
        let _ = t.mkdir(d);
    }
    for u in 0..USERS {
        let fh = t.create(&mailbox(u))?;
        t.close(fh)?;
    }
    let fh = t.create("exim/log/mainlog")?;
    t.close(fh)
}

fn mailbox(u: usize) -> String {
    format!("exim/mail/u{u:04}")
}

/// Run the deliveries on `p.threads` threads for `p.duration`.
pub fn run(t: &dyn Target, p: &Params) -> io::Result<RunResult> {
    setup(t)?;
    t.sync_all()?;
    // Each mailbox's length, under the lock that serialises appends to it.
    let boxes: Vec<Mutex<u64>> = (0..USERS).map(|_| Mutex::new(0)).collect();
    let log = t.open("exim/log/mainlog")?;
    let log_end = AtomicU64::new(0);
    let gamma = Gamma::new(1.5, MEAN_MESSAGE / 1.5).map_err(|e| io::Error::other(e.to_string()))?;
    let r = run_workers(t, "exim", p.threads, p.duration, p.seed, |w| {
        let mut seq = 0u64;
        while w.running() {
            seq += 1;
            let id = format!("exim/input/{:02}{:08x}", w.id, seq);
            let n = (gamma.sample(&mut w.rng) as usize).clamp(64, 1 << 20);
            let started = Instant::now();
            // Spool: data file, then the header written aside and renamed into place.
            let d = t.create(&format!("{id}-D"))?;
            t.write_at(d, 0, &data_pool()[..n])?;
            w.inner_fsync(|| t.fsync(d, false))?;
            t.close(d)?;
            let h = t.create(&format!("{id}-H.tmp"))?;
            t.write_at(h, 0, &data_pool()[n..n + HEADER])?;
            w.inner_fsync(|| t.fsync(h, false))?;
            t.close(h)?;
            t.rename(&format!("{id}-H.tmp"), &format!("{id}-H"))?;
            // Delivery into the recipient's mailbox.
            let u = w.rng.gen_range(0..USERS);
            {
                let mut len = boxes[u].lock();
                let m = t.open(&mailbox(u))?;
                t.write_at(m, *len, &data_pool()[..n])?;
                w.inner_fsync(|| t.fsync(m, false))?;
                t.close(m)?;
                *len += n as u64;
            }
            let at = log_end.fetch_add(LOG_LINE as u64, Ordering::Relaxed);
            t.write_at(log, at, &data_pool()[..LOG_LINE])?;
            t.unlink(&format!("{id}-D"))?;
            t.unlink(&format!("{id}-H"))?;
            w.lat.record(started.elapsed());
            w.ops += 1;
            w.bytes += (2 * n + HEADER + LOG_LINE) as u64;
        }
        Ok(())
    });
    t.close(log)?;
    r
}
