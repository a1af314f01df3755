#![allow(dead_code)] // Used by the commands as they land.
//! Progress bars on stderr: drawn only when stderr is a terminal and the user
//! did not ask for quiet output. The libraries report progress through their
//! own callbacks; this module turns those into bars.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// No estimate before this much of the run: the first moments (threads
/// starting, the first files opened, the first shard created) are no
/// measure of the rest.
const ETA_AFTER: Duration = Duration::from_millis(1000);

/// The time left, from the average rate since the bar started: `3s`,
/// `1m 05s`, `2h 10m`; `?` while nothing (or too little) has been measured.
///
/// indicatif's own `{eta}` weighs the latest steps, which at the start are
/// the slow ones: a 3-second pack showed `eta 6m` first.
pub fn eta_text(pos: u64, len: u64, elapsed: Duration) -> String {
    if pos >= len {
        return "0s".to_owned();
    }
    if pos == 0 || elapsed < ETA_AFTER {
        return "?".to_owned();
    }
    let left = elapsed.as_secs_f64() * (len - pos) as f64 / pos as f64;
    let secs = left.ceil() as u64;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {:02}s", secs / 60, secs % 60),
        _ => format!("{}h {:02}m", secs / 3600, secs / 60 % 60),
    }
}

/// The bar's style with the `{eta_avg}` key ([`eta_text`]).
fn style(template: &str) -> Option<ProgressStyle> {
    ProgressStyle::with_template(template).ok().map(|s| {
        s.with_key(
            "eta_avg",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let text = eta_text(
                    state.pos(),
                    state.len().unwrap_or(u64::MAX),
                    state.elapsed(),
                );
                let _ = w.write_str(&text);
            },
        )
    })
}

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
        "{{spinner}} [{{elapsed_precise}}] {{wide_bar}} {{human_pos}}/{{human_len}} {what} ({{per_sec}}, eta {{eta_avg}}) {{msg}}"
    );
    if let Some(style) = style(&template) {
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
    if let Some(style) = style(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta_avg}) {msg}",
    ) {
        pb.set_style(style);
    }
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_estimate_of_a_short_run_is_not_minutes() {
        // 0.2 s in: nothing to go on yet.
        assert_eq!(eta_text(10, 1000, Duration::from_millis(200)), "?");
        assert_eq!(eta_text(0, 1000, Duration::from_secs(5)), "?");
        // 1 s in, a third done: 2 s left, the whole run 3 s.
        assert_eq!(eta_text(333, 1000, Duration::from_secs(1)), "3s");
        assert_eq!(eta_text(500, 1000, Duration::from_secs(1)), "1s");
        assert_eq!(eta_text(1000, 1000, Duration::from_millis(10)), "0s");
    }

    #[test]
    fn long_estimates_read_in_minutes_and_hours() {
        assert_eq!(eta_text(1, 2, Duration::from_secs(65)), "1m 05s");
        assert_eq!(eta_text(1, 3, Duration::from_secs(3900)), "2h 10m");
    }
}
