//! The storage options' defaults, below both the options ([`crate::options`]
//! re-exports them) and the errors, which name them in their advice.

use std::time::Duration;

/// Retries of a failed request (5xx, timeouts, dropped connections) unless
/// `max_retries` says otherwise.
pub const DEFAULT_MAX_RETRIES: usize = 5;
/// No retry starts after this long from the first attempt, unless `retry_timeout` says otherwise.
pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(30);
/// Time to connect, unless `connect_timeout` says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: &str = "5s";
/// Time for one whole request, unless `timeout` says otherwise.
pub const DEFAULT_TIMEOUT: &str = "60s";
