#![allow(dead_code)] // Used by the commands as they land.
//! Progress bars on stderr: drawn only when stderr is a terminal and the user
//! did not ask for quiet output. The libraries report progress through their
//! own callbacks; this module turns those into bars.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether bars should be drawn.
pub fn enabled(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A bar counting items (samples, shards) with bytes in the message.
pub fn bar(len: u64, what: &str, quiet: bool) -> ProgressBar {
    let pb = if enabled(quiet) {
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    let template = format!(
        "{{spinner}} [{{elapsed_precise}}] {{wide_bar}} {{human_pos}}/{{human_len}} {what} ({{per_sec}}, eta {{eta}}) {{msg}}"
    );
    if let Ok(style) = ProgressStyle::with_template(&template) {
        pb.set_style(style);
    }
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// A byte-counting bar.
pub fn byte_bar(len: u64, quiet: bool) -> ProgressBar {
    let pb = if enabled(quiet) {
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta}) {msg}",
    ) {
        pb.set_style(style);
    }
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}
