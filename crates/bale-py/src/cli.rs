//! `bale._native.cli_main`: the `bale` command inside the wheel.
//!
//! The wheel's `bale` entry point and `python -m bale` (python/bale/_cli.py)
//! call [`cli_main`], which runs the same code as the cargo-installed binary
//! (`bale_cli::run`): same output, same exit codes.

use std::ffi::OsString;

use pyo3::prelude::*;

/// Runs the `bale` command line `argv` (the program name first) and returns
/// its exit code: 0, 1 when problems were found, 2 for errors and usage
/// errors, 130 after Ctrl-C.
///
/// The GIL is released for the whole run. Ctrl-C acts as on the binary:
/// Python's SIGINT handler could only run once the command returned, so the
/// default disposition is put back for the run (a command that cleans up,
/// such as `pack`, installs its own handler and exits 130); the handler that
/// was there is restored afterwards.
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    let _restore = DefaultSigint::install();
    py.detach(|| bale_cli::run(argv))
}

/// SIGINT's default disposition while alive; the previous one after.
struct DefaultSigint(libc::sigaction);

impl DefaultSigint {
    fn install() -> Self {
        // SAFETY: sigaction with a zeroed (SIG_DFL, empty mask) action and
        // a valid out-pointer for the old one.
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut new.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGINT, &new, &mut old);
            Self(old)
        }
    }
}

impl Drop for DefaultSigint {
    fn drop(&mut self) {
        // SAFETY: puts back the action sigaction returned above.
        unsafe {
            libc::sigaction(libc::SIGINT, &self.0, std::ptr::null_mut());
        }
    }
}
