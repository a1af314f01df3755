//! Storage options: the standard environment, then explicit `KEY=VALUE`
//! options, turned into an `object_store` client.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::multipart::MultipartStore;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreScheme, RetryConfig};

use crate::error::{Result, StorageError};

pub use crate::defaults::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RETRIES, DEFAULT_RETRY_TIMEOUT, DEFAULT_TIMEOUT,
};

/// Options for reaching object storage, on top of the standard environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
/// `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `GOOGLE_APPLICATION_CREDENTIALS`,
/// `AZURE_STORAGE_ACCOUNT_NAME`, ...), which they override.
///
/// Keys are `object_store`'s configuration keys, in any case, with or
/// without the cloud's prefix (`aws_endpoint_url`, `endpoint`,
/// `AWS_ACCESS_KEY_ID`, `allow_http`, `timeout`, `connect_timeout`), plus
/// bale's `max_retries` (default 5) and `retry_timeout` (default `30s`):
/// a request that keeps failing gives up after at most `max_retries` retries
/// and no retry starts later than `retry_timeout` after the first attempt.
/// Connecting times out after `connect_timeout` (default `5s`), a whole
/// request after `timeout` (default `60s`).
///
/// ```
/// let mut o = bale_storage::StorageOptions::new();
/// o.set_pair("AWS_ENDPOINT_URL=http://127.0.0.1:9000")?;
/// o.set("allow_http", "true");
/// assert_eq!(o.get("aws_endpoint_url"), Some("http://127.0.0.1:9000"));
/// # Ok::<(), bale_storage::StorageError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct StorageOptions {
    entries: BTreeMap<String, String>,
}

/// Values of keys that hold secrets are not shown.
impl std::fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.entries {
            let secret = ["secret", "token", "password", "sas", "credential", "_key"]
                .iter()
                .any(|s| k.contains(s))
                && !k.ends_with("key_id");
            m.entry(k, &if secret { "<redacted>" } else { v.as_str() });
        }
        m.finish()
    }
}

impl StorageOptions {
    /// No options: the environment alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` (lowercased) to `value`.
    pub fn set(&mut self, key: &str, value: &str) -> &mut Self {
        self.entries
            .insert(key.trim().to_ascii_lowercase(), value.to_owned());
        self
    }

    /// Sets one `KEY=VALUE` pair, as `--storage-option` takes it.
    ///
    /// # Errors
    /// [`StorageError::BadOption`] without `=` or with an empty key.
    pub fn set_pair(&mut self, pair: &str) -> Result<&mut Self> {
        match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok(self.set(k, v)),
            _ => Err(StorageError::BadOption {
                key: pair.to_owned(),
                what: "expected KEY=VALUE".into(),
            }),
        }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .get(&key.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The options, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How long one request may take (`timeout`, [`DEFAULT_TIMEOUT`] unless
    /// set); a value bale cannot read counts as the default.
    pub(crate) fn request_timeout(&self) -> Duration {
        // Spelled as the client reads it: with or without its scheme's prefix.
        ["timeout", "aws_timeout", "google_timeout", "azure_timeout"]
            .iter()
            .find_map(|k| self.get(k))
            .and_then(parse_duration)
            .or_else(|| parse_duration(DEFAULT_TIMEOUT))
            .unwrap_or(Duration::from_secs(60))
    }

    /// A whole number option of bale's own (`upload_part_mib`, ...), if set.
    pub(crate) fn number(&self, key: &str, min: usize, max: usize) -> Result<Option<usize>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.parse::<usize>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(StorageError::BadOption {
                key: key.into(),
                what: format!("{v:?} is not a whole number from {min} to {max}"),
            }),
        }
    }

    /// The retry settings these options give.
    pub(crate) fn retry(&self) -> Result<RetryConfig> {
        let max_retries = match self.get("max_retries") {
            Some(v) => v.parse().map_err(|_| StorageError::BadOption {
                key: "max_retries".into(),
                what: format!("{v:?} is not a whole number"),
            })?,
            None => DEFAULT_MAX_RETRIES,
        };
        let retry_timeout = match self.get("retry_timeout") {
            Some(v) => parse_duration(v).ok_or_else(|| StorageError::BadOption {
                key: "retry_timeout".into(),
                what: format!("{v:?} is not a duration like 30s or 500ms"),
            })?,
            None => DEFAULT_RETRY_TIMEOUT,
        };
        Ok(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries,
            retry_timeout,
        })
    }

    /// Options in a form that identifies a client (with the URL's bucket).
    pub(crate) fn fingerprint(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.entries {
            s.push_str(k);
            s.push('\u{1}');
            s.push_str(v);
            s.push('\u{2}');
        }
        s
    }
}

/// `30s`, `500ms`, `2m`, or a number of seconds.
pub(crate) fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let (num, unit) = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((v, "s"), |i| (&v[..i], v[i..].trim()));
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "sec" | "secs" => n,
        "m" | "min" => n * 60.0,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// Keys that are bale's, not `object_store`'s.
const BALE_KEYS: &[&str] = &[
    "max_retries",
    "retry_timeout",
    "upload_part_mib",
    "upload_parts_in_flight",
];

/// The client configuration keys bale sets by default, with their values.
const CLIENT_DEFAULTS: &[(&str, &str)] = &[
    ("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
    ("timeout", DEFAULT_TIMEOUT),
];

fn bad_key(key: &str, scheme: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::BadOption {
        key: key.to_owned(),
        what: format!("not an option of {scheme}:// storage ({e})"),
    }
}

/// Builds the client for `url` (whose scheme was checked) with the environment and `options`.
pub(crate) fn build_client(
    url: &url::Url,
    scheme: ObjectStoreScheme,
    options: &StorageOptions,
) -> Result<Arc<dyn ObjectStore>> {
    Ok(match build(url, scheme, options)? {
        Built::S3(c, _) => Arc::new(c),
        Built::Gcs(c) => Arc::new(c),
        Built::Azure(c) => Arc::new(c),
        Built::Http(c) => Arc::new(c),
    })
}

/// The multipart-upload client for `url`, built like [`build_client`]'s,
/// and for S3 what listing its open uploads takes: `None` for `https://`
/// (plain HTTP servers take no multipart uploads).
pub(crate) fn build_multipart(
    url: &url::Url,
    scheme: ObjectStoreScheme,
    options: &StorageOptions,
) -> Result<Option<Writer>> {
    Ok(match build(url, scheme, options)? {
        Built::S3(c, lister) => Some((Arc::new(c), Some(lister))),
        Built::Gcs(c) => Some((Arc::new(c), None)),
        Built::Azure(c) => Some((Arc::new(c), None)),
        Built::Http(_) => None,
    })
}

/// A multipart client, and for S3 what lists its open uploads.
pub(crate) type Writer = (Arc<dyn MultipartStore>, Option<crate::uploads::S3Lister>);

enum Built {
    S3(object_store::aws::AmazonS3, crate::uploads::S3Lister),
    Gcs(object_store::gcp::GoogleCloudStorage),
    Azure(object_store::azure::MicrosoftAzure),
    Http(object_store::http::HttpStore),
}

/// Makes ring the process's TLS provider, unless the program already chose
/// one (a Rust program embedding bale may have). reqwest is built without a
/// provider of its own (see the workspace's Cargo.toml).
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error only says that a provider is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn build(url: &url::Url, scheme: ObjectStoreScheme, options: &StorageOptions) -> Result<Built> {
    install_tls_provider();
    let shown = url.as_str();
    let retry = options.retry()?;
    let user = options.iter().filter(|(k, _)| !BALE_KEYS.contains(k));
    let defaults = CLIENT_DEFAULTS
        .iter()
        .filter(|(k, _)| options.get(k).is_none())
        .map(|&(k, v)| (k, v));
    let built = |e: object_store::Error| StorageError::BadUrl {
        url: shown.to_owned(),
        what: format!("cannot set up the client: {e}"),
    };
    Ok(match scheme {
        ObjectStoreScheme::AmazonS3 => {
            let mut b = AmazonS3Builder::from_env().with_url(shown);
            for (k, v) in defaults.chain(user) {
                let key = AmazonS3ConfigKey::from_str(k).map_err(|e| bad_key(k, "s3", e))?;
                b = b.with_config(key, v);
            }
            // The bucket is the URL's host (the builder parses its URL only
            // when it builds).
            if let (Some(endpoint), Some(bucket)) = (
                b.get_config_value(&AmazonS3ConfigKey::Endpoint),
                url.host_str(),
            ) {
                let virtual_hosted = b
                    .get_config_value(&AmazonS3ConfigKey::VirtualHostedStyleRequest)
                    .is_some_and(|v| v == "true");
                endpoint_for(&endpoint, bucket, virtual_hosted).map_err(|what| {
                    StorageError::BadOption {
                        key: "aws_endpoint_url".into(),
                        what,
                    }
                })?;
            }
            let lister = crate::uploads::S3Lister::from_builder(&b, url);
            let client = b.with_retry(retry).build().map_err(built)?;
            let lister = lister.with_credentials(client.credentials().clone());
            Built::S3(client, lister)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let mut b = GoogleCloudStorageBuilder::from_env().with_url(shown);
            for (k, v) in defaults.chain(user) {
                let key = GoogleConfigKey::from_str(k).map_err(|e| bad_key(k, "gs", e))?;
                b = b.with_config(key, v);
            }
            Built::Gcs(b.with_retry(retry).build().map_err(built)?)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let mut b = MicrosoftAzureBuilder::from_env().with_url(shown);
            for (k, v) in defaults.chain(user) {
                let key = AzureConfigKey::from_str(k).map_err(|e| bad_key(k, "az", e))?;
                b = b.with_config(key, v);
            }
            Built::Azure(b.with_retry(retry).build().map_err(built)?)
        }
        ObjectStoreScheme::Http => {
            // The server's root: object paths are relative to it.
            let mut root = url.clone();
            root.set_path("/");
            let mut b = HttpBuilder::new().with_url(root.as_str());
            if url.scheme() == "http" && options.get("allow_http").is_none() {
                // An http:// URL says plain HTTP as clearly as the option would.
                b = b.with_config(ClientConfigKey::AllowHttp, "true");
            }
            for (k, v) in defaults.chain(user) {
                let key = ClientConfigKey::from_str(k.strip_prefix("http_").unwrap_or(k))
                    .map_err(|e| bad_key(k, "https", e))?;
                b = b.with_config(key, v);
            }
            Built::Http(b.with_retry(retry).build().map_err(built)?)
        }
        _ => {
            return Err(StorageError::BadUrl {
                url: shown.to_owned(),
                what: "not an object-storage URL".into(),
            });
        }
    })
}

/// Checks that requests to `endpoint` reach `bucket`, the URL's: path
/// style sends them to ENDPOINT/BUCKET/KEY, so a path in the endpoint
/// (`http://host:9000/other`) would be taken for the bucket, and objects,
/// the lock among them, would land in another bucket than the one named;
/// virtual-hosted style takes the endpoint as the bucket's own, which must
/// then be that of `bucket`.
fn endpoint_for(
    endpoint: &str,
    bucket: &str,
    virtual_hosted: bool,
) -> std::result::Result<(), String> {
    // (The client panics on some, such as a port that is no number.)
    let url = url::Url::parse(endpoint)
        .map_err(|e| format!("{endpoint} is not a URL ({e}): write http://HOST:PORT"))?;
    let path = url.path().trim_end_matches('/');
    if !virtual_hosted {
        if path.is_empty() {
            return Ok(());
        }
        return Err(format!(
            "{endpoint} has a path ({path}), which requests would take for the bucket (they go to ENDPOINT/BUCKET/KEY): give the server alone (http://HOST:PORT) and the bucket in the URL (s3://BUCKET/PREFIX)"
        ));
    }
    let host = url.host_str().unwrap_or("");
    if host.starts_with(&format!("{bucket}.")) || path == format!("/{bucket}") {
        return Ok(());
    }
    Err(format!(
        "with aws_virtual_hosted_style_request the endpoint is the bucket's own (http://{bucket}.HOST), and {endpoint} is not that of the URL's bucket {bucket}: objects would go to another bucket"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_must_reach_the_urls_bucket() {
        assert!(endpoint_for("http://127.0.0.1:9000", "bkt", false).is_ok());
        let e = endpoint_for("http://127.0.0.1:abc", "bkt", false).unwrap_err();
        assert!(e.contains("is not a URL"), "{e}");
        assert!(endpoint_for("http://127.0.0.1:9000/", "bkt", false).is_ok());
        let e = endpoint_for("http://127.0.0.1:9000/other", "bkt", false).unwrap_err();
        assert!(e.contains("has a path (/other)"), "{e}");
        assert!(endpoint_for("https://bkt.s3.amazonaws.com", "bkt", true).is_ok());
        let e = endpoint_for("http://127.0.0.1:9000/other", "bkt", true).unwrap_err();
        assert!(e.contains("not that of the URL's bucket bkt"), "{e}");
        assert!(endpoint_for("https://other.s3.amazonaws.com", "bkt", true).is_err());
    }

    #[test]
    fn durations_and_pairs() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("2 m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("x"), None);
        let mut o = StorageOptions::new();
        assert!(o.set_pair("novalue").is_err());
        assert!(o.set_pair("=v").is_err());
        o.set_pair("Max_Retries=2").unwrap();
        assert_eq!(o.retry().unwrap().max_retries, 2);
        // The request timeout, however the client's key is spelled.
        assert_eq!(o.request_timeout(), Duration::from_secs(60));
        for key in ["timeout", "AWS_TIMEOUT", "google_timeout", "azure_timeout"] {
            let mut t = StorageOptions::default();
            t.set(key, "7s");
            assert_eq!(t.request_timeout(), Duration::from_secs(7), "{key}");
        }
        o.set("retry_timeout", "soon");
        assert!(o.retry().unwrap_err().to_string().contains("retry_timeout"));
        o.set("AWS_SECRET_ACCESS_KEY", "hunter2")
            .set("aws_access_key_id", "AKIA");
        let shown = format!("{o:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("AKIA"),
            "{shown}"
        );
    }
}
