//! The cjfs lab: the journaling papers' workloads, runnable in-process on any device or on
//! any mounted directory through one generator, and the benchmarks built on them.
//!
//! * [`workloads`]: varmail, fileserver, dbench, OLTP-insert, FxMark, sysbench, the fsync
//!   tester, SQLite-like patterns and an exim-like mail server, written once against
//!   [`Target`];
//! * [`bench`]: sweeps over workloads, threads, targets and journal modes with interleaved
//!   repetitions; [`report`] and [`charts`] turn them into tables, JSON/CSV and figures;
//! * [`compare`]: whether a fresh run agrees with committed results, ratio by ratio;
//! * [`device`]: the device sanity check; [`smoke`]: the quickest look at this machine;
//! * [`crash`]: the crash-consistency harness behind `cjfs crashtest`;
//! * [`sqlite`]: the journaling-of-journal paper's SQLite benchmark with the SQLite library
//!   itself, in-process on cjfs through an SQLite VFS or on any directory.

pub mod bench;
pub mod charts;
pub mod compare;
pub mod crash;
pub mod device;
pub mod hist;
pub mod machine;
pub mod report;
pub mod smoke;
pub mod sqlite;
pub mod stats;
pub mod target;
pub mod wait_stress;
pub mod workloads;

pub use machine::Machine;
pub use target::{CjfsTarget, DirTarget, Fh, Stat, Target};
