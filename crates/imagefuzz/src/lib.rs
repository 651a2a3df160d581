//! cjfs-imagefuzz: a structure-aware fuzzer of ext4 images for the `cjfs` command line tool.
//!
//! A run ([`campaign::run_campaign`]) makes fresh seed images ([`seeds`]: one made and filled
//! by `cjfs`, one made by `mkfs.ext4`, one whose journal needs recovery), maps where every
//! metadata structure lives ([`layout`]), and for each of N images applies a mutation aimed
//! at one structure ([`mutate`]). Every image is then judged ([`judge`]): each read-only
//! command of the `cjfs` binary, `recover` and one writing command on copies, optionally a
//! FUSE mount, each as a subprocess with a timeout ([`run`]), and each run is classified
//! ([`classify`]): `ok`, `refused`, `multi_line_error`, `killed_by_signal`, or the failures
//! `panic`, `hang`, `changed_by_readonly` and `write_left_unclean`. The report
//! ([`report`]) counts classes per command and per mutated structure and groups the
//! failures; failing images are saved in the corpus format ([`corpus`]) that a later run, or
//! the regression test, replays.

pub mod campaign;
pub mod classify;
pub mod corpus;
pub mod error;
pub mod judge;
pub mod layout;
pub mod mount;
pub mod mutate;
pub mod report;
pub mod run;
pub mod seeds;

pub use campaign::{Config, replay_corpus, run_campaign};
pub use classify::Outcome;
pub use error::{FuzzError, FuzzResult};
pub use report::Report;
