//! Standard output of the commands. A failed write (a full disk, `> /dev/full`) is a command
//! error naming stdout, never a panic; a closed pipe (`cjfs cat IMG F | head -c1`) ends the
//! command at once, quietly and successfully: the reader has all it wanted.

use std::io::Write;

use crate::error::{CliError, CliResult};

/// Map a write error on stdout: a closed pipe ends the command ([`CliError::StdoutClosed`]).
fn stdout_error(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::StdoutClosed
    } else {
        CliError::io("stdout", e)
    }
}

/// Write one formatted line to stdout (see [`outln!`]).
pub fn line(args: std::fmt::Arguments<'_>) -> CliResult<()> {
    let mut o = std::io::stdout().lock();
    o.write_fmt(args).and_then(|()| o.write_all(b"\n")).map_err(stdout_error)
}

/// Write formatted text to stdout without a newline.
pub fn text(args: std::fmt::Arguments<'_>) -> CliResult<()> {
    std::io::stdout().lock().write_fmt(args).map_err(stdout_error)
}

/// Flush stdout, reporting a failure.
pub fn flush() -> CliResult<()> {
    std::io::stdout().lock().flush().map_err(stdout_error)
}

/// `println!` that returns the write error from the enclosing function (which returns a
/// [`CliResult`]).
macro_rules! outln {
    () => { $crate::out::line(format_args!(""))? };
    ($($a:tt)*) => { $crate::out::line(format_args!($($a)*))? };
}

/// `print!` that returns the write error from the enclosing function.
macro_rules! out {
    ($($a:tt)*) => { $crate::out::text(format_args!($($a)*))? };
}

pub(crate) use {out, outln};

/// Buffered stdout for bulk output (file contents, listings).
pub struct Out {
    w: std::io::BufWriter<std::io::StdoutLock<'static>>,
}

impl Out {
    /// Lock stdout for the command's output.
    pub fn new() -> Self {
        Out { w: std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock()) }
    }

    /// Write `b`.
    pub fn write(&mut self, b: &[u8]) -> CliResult<()> {
        self.w.write_all(b).map_err(stdout_error)
    }

    /// Flush what is buffered.
    pub fn finish(mut self) -> CliResult<()> {
        self.w.flush().map_err(stdout_error)
    }
}
