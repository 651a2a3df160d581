//! The cjfs lab: the journaling papers' workloads, runnable in-process on any device or on
//! any mounted directory through one generator, and the benchmarks built on them.

pub mod hist;
pub mod machine;
pub mod smoke;
pub mod target;
pub mod workloads;

pub use machine::Machine;
pub use target::{CjfsTarget, DirTarget, Fh, Target};
