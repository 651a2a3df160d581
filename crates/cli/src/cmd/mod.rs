//! The subcommands, one module each (the file commands share `files`).

pub mod check;
pub mod files;
pub mod info;
pub mod mkfs;
pub mod quota;
pub mod recover;
