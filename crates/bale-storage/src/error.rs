//! The one error type of `bale-storage`.

use std::ops::Range;
use std::path::PathBuf;

/// A result with [`StorageError`].
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Everything that can go wrong reaching a dataset's files.
///
/// Every variant names the URL (or cache file) it concerns; requests also
/// name the byte range and the HTTP status when there was one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A URL bale cannot use.
    #[error("{url}: {what}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        what: String,
    },
    /// A storage option that is unknown or has a bad value.
    #[error("storage option {key}: {what}")]
    BadOption {
        /// The option's key.
        key: String,
        /// What is wrong.
        what: String,
    },
    /// The object does not exist (HTTP 404), or its bucket does not.
    #[error("{url} does not exist (HTTP 404{})", detail_suffix(detail))]
    NotFound {
        /// The object's URL.
        url: String,
        /// What the server said, when it said something useful.
        detail: String,
    },
    /// The server refused the credentials (HTTP 401, or 403 naming a bad key or signature).
    #[error(
        "{url}: the server refused the credentials (HTTP {status}{}); check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the GCS / Azure equivalents) or the storage options",
        detail_suffix(detail)
    )]
    Credentials {
        /// The object's URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What the server said.
        detail: String,
    },
    /// No credentials anywhere: none in the environment or the options, and
    /// the client's last resort, the cloud's instance metadata service
    /// (169.254.169.254), gave none (it does not exist off a cloud VM).
    #[error(
        "{url}: no credentials: none in the environment or the storage options, and the instance metadata service (169.254.169.254) gave none; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the GCS / Azure equivalents), pass them as storage options, or set AWS_SKIP_SIGNATURE=true for a public bucket"
    )]
    NoCredentials {
        /// The object's URL.
        url: String,
    },
    /// The credentials were accepted but do not allow this request (HTTP 403).
    #[error("{url}: access denied (HTTP 403{})", detail_suffix(detail))]
    Denied {
        /// The object's URL.
        url: String,
        /// What the server said.
        detail: String,
    },
    /// A request failed after its retries.
    #[error("{url}{}: {what}", range_text(range))]
    Request {
        /// The object's URL.
        url: String,
        /// The byte range asked for, when it was a ranged read.
        range: Option<Range<u64>>,
        /// The HTTP status of the last answer, when there was one.
        status: Option<u16>,
        /// What happened (status, connection refused, timeout; retries made).
        what: String,
    },
    /// The object is not what the manifest or index recorded (its size, or
    /// it changed between two reads).
    #[error("{url}: {what}")]
    Changed {
        /// The object's URL.
        url: String,
        /// What differs.
        what: String,
    },
    /// An object larger than bale accepts for what it holds.
    #[error("{url} is {len} bytes, more than the {cap} bytes bale accepts for {what}")]
    TooLarge {
        /// The object's URL.
        url: String,
        /// Its size.
        len: u64,
        /// The cap.
        cap: u64,
        /// What the object should hold (`manifest`, `index`).
        what: &'static str,
    },
    /// The local cache could not be used.
    #[error("cache {}: {what}", bale_format::shown(path))]
    Cache {
        /// The cache directory or file.
        path: PathBuf,
        /// What went wrong.
        what: String,
    },
    /// The output already holds something the writer may not replace.
    #[error("{url}: {what}")]
    Exists {
        /// The prefix's (or object's) URL.
        url: String,
        /// What is there, and what to do.
        what: String,
    },
    /// A local file being uploaded could not be read.
    #[error("{}: {source}", bale_format::shown(path))]
    Io {
        /// The local file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The run was interrupted (Ctrl-C, SIGTERM).
    #[error("interrupted")]
    Cancelled,
    /// The I/O runtime could not be started.
    #[error("cannot start the I/O runtime: {0}")]
    Runtime(String),
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

fn range_text(range: &Option<Range<u64>>) -> String {
    match range {
        Some(r) => format!(" bytes {}..{}", r.start, r.end),
        None => String::new(),
    }
}

impl StorageError {
    /// Whether the object (or its bucket) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::NotFound { .. })
    }

    /// This error as an `io::Error` (kind `NotFound` for a missing object),
    /// for the format's readers, which report I/O errors with the file and offset.
    pub fn into_io(self) -> std::io::Error {
        let kind = match &self {
            StorageError::NotFound { .. } => std::io::ErrorKind::NotFound,
            StorageError::Credentials { .. }
            | StorageError::NoCredentials { .. }
            | StorageError::Denied { .. } => std::io::ErrorKind::PermissionDenied,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, self)
    }
}

impl From<StorageError> for std::io::Error {
    fn from(e: StorageError) -> Self {
        e.into_io()
    }
}

/// Turns an `object_store` error into a [`StorageError`] naming `url` and `range`.
pub(crate) fn from_object_store(
    url: &str,
    range: Option<Range<u64>>,
    e: object_store::Error,
) -> StorageError {
    use object_store::Error as E;
    let url = &shown_text(url);
    let text = chain_text(&e);
    // A 200 whose body says InternalError or SlowDown is a server error
    // (the client says "Server returned error response"): an answer.
    let status = status_in(&text).or_else(|| {
        text.contains("Server returned error response: ")
            .then_some(if text.contains("SlowDown") { 503 } else { 500 })
    });
    let detail = server_detail(&text);
    // The credential chain's last step failed: nothing was configured.
    if text.contains("169.254.169.254") {
        return StorageError::NoCredentials {
            url: url.to_owned(),
        };
    }
    // A bulk delete's answer for one key: the store answered for it, with
    // an S3 error code in place of a status.
    if let Some((code, message)) = bulk_key_error(&text) {
        let detail = format!("{code}: {message}");
        return match code {
            "NoSuchKey" => StorageError::NotFound {
                url: url.to_owned(),
                detail,
            },
            "AccessDenied" | "AllAccessDisabled" => StorageError::Denied {
                url: url.to_owned(),
                detail,
            },
            _ => {
                let status = match code {
                    "InternalError" => 500,
                    "ServiceUnavailable" | "SlowDown" => 503,
                    _ => 400,
                };
                StorageError::Request {
                    url: url.to_owned(),
                    range,
                    status: Some(status),
                    what: format!("the store refused to delete it ({detail})"),
                }
            }
        };
    }
    match e {
        E::NotFound { .. } => StorageError::NotFound {
            url: url.to_owned(),
            detail,
        },
        E::Unauthenticated { .. } => StorageError::Credentials {
            url: url.to_owned(),
            status: status.unwrap_or(401),
            detail,
        },
        E::PermissionDenied { .. } => {
            if refused_credentials(&text) {
                StorageError::Credentials {
                    url: url.to_owned(),
                    status: status.unwrap_or(403),
                    detail,
                }
            } else {
                StorageError::Denied {
                    url: url.to_owned(),
                    detail,
                }
            }
        }
        _ if status == Some(404) => StorageError::NotFound {
            url: url.to_owned(),
            detail,
        },
        _ if status == Some(403) && refused_credentials(&text) => StorageError::Credentials {
            url: url.to_owned(),
            status: 403,
            detail,
        },
        _ => StorageError::Request {
            url: url.to_owned(),
            range,
            status,
            what: plain_what(&text, status),
        },
    }
}

/// The error and its sources, joined.
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        source = s.source();
    }
    // A key or a server's message may hold control characters (an object
    // named with a newline): shown escaped, never raw on a terminal.
    shown_text(&text)
}

/// `text` with its control characters escaped, as [`bale_format::shown`]
/// shows a path: a URL or a key from a manifest or a listing cannot forge a
/// line or send an escape sequence to the terminal.
pub(crate) fn shown_text(text: &str) -> String {
    if text.chars().any(char::is_control) {
        bale_format::shown(std::path::Path::new(text)).to_string()
    } else {
        text.to_owned()
    }
}

/// The S3 error code and message of one key in a bulk delete's answer, as
/// `object_store` says it ("DeleteObjects request failed for key K: M
/// (code: C)").
fn bulk_key_error(text: &str) -> Option<(&str, &str)> {
    const FAILED: &str = "DeleteObjects request failed for key ";
    let rest = &text[text.find(FAILED)? + FAILED.len()..];
    let open = rest.rfind(" (code: ")?;
    let code = rest[open + 8..].strip_suffix(')')?;
    // The key may hold ": " too; the message is what follows the last.
    let message = rest[..open].rsplit_once(": ").map_or("", |(_, m)| m);
    Some((code, message))
}

/// How long a request ran before it gave up, as an `object_store` message
/// says it ("Error performing GET <url> in 2.0034s"): seconds to a tenth,
/// shorter spans as written.
fn waited_text(text: &str) -> Option<String> {
    let at = text.find("Error performing ")?;
    let rest = &text[at..];
    let from = rest.find(" in ")? + 4;
    let span = rest[from..].split([',', ' ']).next()?;
    match span.strip_suffix('s') {
        Some(secs) if secs.ends_with(|c: char| c.is_ascii_digit()) => {
            secs.parse::<f64>().ok().map(|v| format!("{v:.1}s"))
        }
        _ if span.ends_with('s') => Some(span.to_owned()),
        _ => None,
    }
}

/// The HTTP status an `object_store` message names (`status code: 403 Forbidden`).
fn status_in(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    text.get(at..at + 3)?.parse().ok()
}

/// Whether a 403's body says the key or signature is wrong (S3's error codes).
fn refused_credentials(text: &str) -> bool {
    [
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "AuthorizationHeaderMalformed",
        "InvalidSecurity",
    ]
    .iter()
    .any(|c| text.contains(c))
}

/// The S3 error code and message in a response body, when present.
fn server_detail(text: &str) -> String {
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        let a = text.find(&open)? + open.len();
        let b = text[a..].find(&close)? + a;
        Some(text[a..b].to_owned())
    };
    match (tag("Code"), tag("Message")) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(c), None) => c,
        _ => String::new(),
    }
}

/// A shorter message for request failures: the status or the connection
/// error, and the retries `object_store` reports.
fn plain_what(text: &str, status: Option<u16>) -> String {
    let detail = server_detail(text);
    let mut what = match status {
        Some(s) => format!("HTTP {s}"),
        None => String::new(),
    };
    if !detail.is_empty() {
        what.push_str(&format!(" ({detail})"));
    }
    // `object_store` says "Error performing GET <url> in 1.2s, after 3 retries, ... - <cause>".
    let tail = text.split(" - ").skip(1).collect::<Vec<_>>().join(" - ");
    let retries = text.find(", after ").and_then(|a| {
        text[a + 2..]
            .find(" retries")
            .map(|b| &text[a + 2..a + 2 + b])
    });
    let cause = if tail.is_empty() { text } else { &tail };
    // `object_store`'s "Generic S3 error: " says nothing to a user.
    let cause = match cause.strip_prefix("Generic ") {
        Some(rest) => rest.split_once(" error: ").map_or(cause, |(_, c)| c),
        None => cause,
    };
    // A server's whole answer (a bulk delete's lists a thousand keys) is
    // cut to its start.
    const CAUSE_MAX: usize = 400;
    let cut;
    let cause = if cause.len() > CAUSE_MAX {
        let mut end = CAUSE_MAX;
        while !cause.is_char_boundary(end) {
            end -= 1;
        }
        cut = format!("{}... ({} bytes in all)", &cause[..end], cause.len());
        cut.as_str()
    } else {
        cause
    };
    if status.is_none() || detail.is_empty() {
        if !what.is_empty() {
            what.push_str(": ");
        }
        what.push_str(cause.trim());
    }
    if let Some(r) = retries {
        what.push_str(&format!(" ({r} retries)"));
    }
    // The request as sent ("GET http://host:port/bucket/key"): names the endpoint.
    if let Some(at) = text.find("Error performing ")
        && let Some(end) = text[at + 17..].find(" in ")
    {
        let rest = &text[at + 17..];
        what.push_str(&format!("; request: {}", &rest[..end]));
    }
    if text.contains("InvalidBucketName") {
        what.push_str(
            "; a bucket's name is 3-63 lower-case letters, digits, '-' and '.' (s3://my-bucket/prefix)",
        );
    }
    // A stall ended by the client's own limit: say which limit, and how to
    // raise it where the store is slow rather than gone.
    // Read from the cause alone: a bucket or key may be named "connect".
    if status.is_none() && cause.contains("timed out") {
        let connecting = ["(Connect)", "connect error", "tcp connect"]
            .iter()
            .any(|m| cause.contains(m));
        let (key, default) = if connecting {
            ("connect_timeout", crate::defaults::DEFAULT_CONNECT_TIMEOUT)
        } else {
            ("timeout", crate::defaults::DEFAULT_TIMEOUT)
        };
        // The limit in force is the one the request ran under: what it
        // waited says it, where a default would mislead a user who set it.
        let waited = waited_text(text)
            .map(|w| format!("; the request gave up after {w} in all"))
            .unwrap_or_default();
        what.push_str(&format!(
            "; no answer within the storage option {key} (each attempt's limit, {default} unless \
             set{waited}); raise it with --storage-option {key}=120s, or \
             storage_options={{\"{key}\": \"120s\"}} in Python"
        ));
    }
    what
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_answers_are_read_for_status_and_code() {
        let body = "Error performing GET http://127.0.0.1:1/b/k in 10ms - Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?><Error><Code>InvalidAccessKeyId</Code><Message>The access key ID you provided does not exist.</Message></Error>";
        assert_eq!(status_in(body), Some(403));
        assert!(refused_credentials(body));
        assert_eq!(
            server_detail(body),
            "InvalidAccessKeyId: The access key ID you provided does not exist."
        );
        let refused = "Error performing GET http://127.0.0.1:1/b/k in 1.5s, after 3 retries, max_retries: 3, retry_timeout: 10s  - HTTP error: error sending request";
        let what = plain_what(refused, None);
        assert!(what.contains("error sending request"), "{what}");
        assert!(what.contains("3 retries"), "{what}");
        assert!(!what.contains("storage option"), "{what}");
    }

    #[test]
    fn a_bulk_deletes_answer_for_one_key_is_an_answer() {
        let failed = |code: &str| {
            let e = object_store::Error::Generic {
                store: "S3",
                source: format!(
                    "DeleteObjects request failed for key ds/shard-000001.tar: it is not yours (code: {code})"
                )
                .into(),
            };
            from_object_store("s3://b/ds/shard-000001.tar", None, e)
        };
        // A refusal is no request that may still land, and is not sent again.
        match failed("AccessDenied") {
            StorageError::Denied { url, detail } => {
                assert_eq!(url, "s3://b/ds/shard-000001.tar");
                assert_eq!(detail, "AccessDenied: it is not yours");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(failed("NoSuchKey"), StorageError::NotFound { .. }));
        for (code, want) in [
            ("InternalError", 500),
            ("SlowDown", 503),
            ("ServiceUnavailable", 503),
            ("InvalidArgument", 400),
        ] {
            match failed(code) {
                StorageError::Request {
                    status: Some(s),
                    what,
                    ..
                } => {
                    assert_eq!(s, want, "{code}");
                    assert!(what.contains(code), "{what}");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        // A 200 whose body says SlowDown or InternalError: a server's answer.
        for (code, want) in [("SlowDown", 503), ("InternalError", 500)] {
            let body = object_store::Error::Generic {
                store: "S3",
                source: format!("Error performing POST http://127.0.0.1:1/b?delete in 5ms - Server returned error response: <Error><Code>{code}</Code></Error>").into(),
            };
            assert!(matches!(
                from_object_store("s3://b/ds/x", None, body),
                StorageError::Request { status: Some(s), .. } if s == want
            ));
        }
        // A request that failed as a whole is not one key's answer.
        let whole = object_store::Error::Generic {
            store: "S3",
            source: "Error performing POST http://127.0.0.1:1/b?delete in 6s - operation timed out"
                .into(),
        };
        assert!(matches!(
            from_object_store("s3://b/ds/x", None, whole),
            StorageError::Request { status: None, .. }
        ));
    }

    #[test]
    fn a_long_answer_is_cut_in_the_message() {
        let body = format!(
            "Error performing POST http://127.0.0.1:1/b?delete in 3ms - Server returned error response: <DeleteResult>{}</DeleteResult>",
            "<Deleted><Key>ds/shard-000000.tar</Key></Deleted>".repeat(1000)
        );
        let what = plain_what(&body, None);
        assert!(what.len() < 600, "{}", what.len());
        assert!(what.contains("bytes in all)"), "{what}");
    }

    #[test]
    fn a_bad_bucket_name_says_what_a_name_is() {
        let body = "Error performing PUT http://127.0.0.1:1/BKT/ds/.bale-tmp-lock in 3ms - Server returned non-2xx status code: 400 Bad Request: <Error><Code>InvalidBucketName</Code><Message>The specified bucket is not valid.</Message></Error>";
        let what = plain_what(body, Some(400));
        assert!(what.contains("InvalidBucketName"), "{what}");
        assert!(what.contains("lower-case letters, digits"), "{what}");
    }

    #[test]
    fn a_timeout_names_the_option_that_sets_it() {
        let stalled = "Error performing GET http://127.0.0.1:1/b/ds/bale.json in 2s, after 1 retries, max_retries: 1, retry_timeout: 180s  - HTTP error: error sending request: operation timed out";
        let what = plain_what(stalled, None);
        assert!(what.contains("operation timed out"), "{what}");
        assert!(what.contains("--storage-option timeout=120s"), "{what}");
        // The limit in force, not a default the user may have changed.
        assert!(
            what.contains(
                "each attempt's limit, 60s unless set; the request gave up after 2.0s in all"
            ),
            "{what}"
        );
        let precise = stalled.replace(" in 2s,", " in 6.00213s,");
        assert!(
            plain_what(&precise, None).contains("gave up after 6.0s in all"),
            "{}",
            plain_what(&precise, None)
        );
        let short = stalled.replace(" in 2s,", " in 950ms,");
        assert!(
            plain_what(&short, None).contains("gave up after 950ms in all"),
            "{}",
            plain_what(&short, None)
        );
        assert!(
            what.contains(r#"storage_options={"timeout": "120s"}"#),
            "{what}"
        );
        let connect = "Error performing GET http://10.0.0.1/b/k in 5s - HTTP error: error sending request: client error (Connect): tcp connect error: operation timed out";
        let what = plain_what(connect, None);
        // A bucket named like the word is not a connection's timeout.
        let named = "Error performing GET http://127.0.0.1:1/connectomics/bale.json in 2s - HTTP error: error sending request: operation timed out";
        assert!(
            plain_what(named, None).contains("--storage-option timeout=120s"),
            "{}",
            plain_what(named, None)
        );
        assert!(
            what.contains("--storage-option connect_timeout=120s"),
            "{what}"
        );
    }

    #[test]
    fn a_key_with_control_characters_is_shown_escaped() {
        // What listing a prefix answers when it holds an object whose key
        // has a newline (`aws s3 cp x $'s3://b/ds/vic\ntim'`).
        let source = object_store::path::Path::parse("ds/vic\ntim\x1b[2J").unwrap_err();
        let e = object_store::Error::InvalidPath { source };
        let text = from_object_store("s3://b/ds", None, e).to_string();
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(text.contains("vic\\ntim\\x1b[2J"), "{text}");
        // The URL too (a manifest may name one).
        let e = object_store::Error::NotFound {
            path: "wds/x".into(),
            source: "404".into(),
        };
        let text = from_object_store("s3://b/wds/\x1b[31mRED\nX.tar", None, e).to_string();
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(
            text.starts_with("s3://b/wds/\\x1b[31mRED\\nX.tar does not exist"),
            "{text}"
        );
    }

    #[test]
    fn no_credentials_anywhere_says_so_and_what_to_set() {
        // What the S3 client answers when its credential chain ends at the
        // instance metadata service and that fails.
        let e = object_store::Error::Generic {
            store: "S3",
            source: "Error performing PUT http://169.254.169.254/latest/api/token in 1ms - Server returned non-2xx status code: 403 Forbidden".into(),
        };
        let got = from_object_store("s3://b/ds/bale.json", None, e);
        assert!(matches!(got, StorageError::NoCredentials { .. }), "{got:?}");
        let text = got.to_string();
        assert!(
            text.starts_with("s3://b/ds/bale.json: no credentials"),
            "{text}"
        );
        assert!(text.contains("AWS_ACCESS_KEY_ID"), "{text}");
        assert_eq!(got.into_io().kind(), std::io::ErrorKind::PermissionDenied);
    }
}
