//! A dataset's prefix in object storage ([`Store`]) and its objects ([`Object`]).

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use object_store::path::{Path as ObjPath, PathPart};
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, ObjectStoreScheme};

use crate::error::{Result, StorageError, from_object_store};
use crate::options::{StorageOptions, build_client};
use crate::runtime::{self, Pending};

/// A prefix in object storage (`s3://bucket/datasets/train`) holding a
/// dataset's files, with the options to reach it.
///
/// Cheap to clone. Holds no connection: the client is made per process on
/// first use (see the crate docs on `fork`).
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    /// The URL as given, without a trailing `/`.
    url: String,
    parsed: url::Url,
    scheme: ObjectStoreScheme,
    prefix: ObjPath,
    options: StorageOptions,
    /// Identifies the client configuration (scheme, bucket or host, options).
    key: String,
}

/// Why `parsed` cannot name objects, when its path has an empty segment
/// (`s3://b/ds//x.tar`): object stores keep `ds//x.tar` and `ds/x.tar`
/// apart, where the client would read or write the second.
pub(crate) fn empty_segment(parsed: &url::Url) -> Option<String> {
    parsed.path().contains("//").then(|| {
        "an empty path segment ('//') in the URL: bale would reach another object than the one named; write single slashes".to_owned()
    })
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

/// Whether the URL `url` may name the object `key` (its path within its
/// bucket, as `s3://bucket/KEY` gives it), whatever the spelling: another
/// scheme for the same store (`s3a://`, `abfs://`), an `https://` URL with
/// the bucket in the host or in the path, percent-encoding, a trailing `/`.
/// On the safe side: the URL's decoded path equals the key or ends with
/// `/KEY`, so an object of the same key in another bucket also matches.
pub fn may_name_object(url: &str, key: &str) -> bool {
    let key = percent_decoded(key.trim_matches('/'));
    if key.is_empty() {
        return false;
    }
    let Ok(parsed) = url::Url::parse(url.trim_end_matches('/')) else {
        return false;
    };
    let path = percent_decoded(parsed.path());
    let path = path.trim_end_matches('/');
    path == key || path.ends_with(&format!("/{key}"))
}

/// The object key a URL of a store names: its decoded path, bucket aside
/// (`s3://bucket/a/b` gives `a/b`).
pub fn object_key(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url.trim_end_matches('/')).ok()?;
    Some(percent_decoded(parsed.path().trim_start_matches('/')))
}

/// `s` with its `%XX` escapes decoded (others left as they are).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Refuses what a URL parser would quietly change, so that the objects a
/// command reads or `--force` clears are the ones the user typed: control
/// characters (tabs and newlines are dropped by the parser) and `.` or `..`
/// segments (resolved by it: `s3://b/parts/x/../p1` is `s3://b/parts/p1`).
fn check_url_text(url: &str) -> std::result::Result<(), String> {
    if let Some(c) = url.chars().find(|c| c.is_control()) {
        return Err(format!(
            "it holds the control character {c:?}; write it percent-encoded if an object name really holds it"
        ));
    }
    if url.contains('\\') {
        return Err(
            "it holds a backslash, which a URL parser reads as `/` in http(s) URLs; write it \
             as %5C if an object name really holds it"
                .into(),
        );
    }
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = path.split_once('/').map_or("", |(_, p)| p);
    let path = path.split(['?', '#']).next().unwrap_or("");
    if path.contains("%2F") || path.contains("%2f") {
        return Err(
            "it holds %2F, an encoded `/`, which the store's client reads as a separator \
             (so `s3://b/ds%2F` names the prefix `ds`, not what --force and the checks of \
             inputs compare); write `/`"
                .into(),
        );
    }
    for seg in path.split('/') {
        let seg = seg.replace("%2e", ".").replace("%2E", ".");
        if seg == "." || seg == ".." {
            return Err(format!(
                "it has a {seg:?} segment, which would be resolved before any request \
                 (another prefix than the one written); write the prefix without it"
            ));
        }
    }
    Ok(())
}

impl Store {
    /// The store at `url` (`s3://bucket/prefix`, `gs://`, `az://`,
    /// `https://host/path`), configured from the environment and `options`.
    /// Checks the URL and the options; sends no request.
    ///
    /// # Errors
    /// [`StorageError::BadUrl`] for a URL bale cannot use (unsupported
    /// scheme, `?` or `#` in it, no bucket); [`StorageError::BadOption`].
    pub fn open(url: &str, options: &StorageOptions) -> Result<Store> {
        let bad = |what: String| StorageError::BadUrl {
            url: crate::error::shown_text(url),
            what,
        };
        check_url_text(url).map_err(bad)?;
        let trimmed = url.trim_end_matches('/');
        let parsed = url::Url::parse(trimmed).map_err(|e| bad(format!("not a valid URL: {e}")))?;
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad(
                "a dataset URL has no query or fragment: write '?' as %3F and '#' as %23 in object names"
                    .into(),
            ));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(bad(
                "no bucket (or host) in the URL: write scheme://bucket/prefix".into(),
            ));
        }
        // `s3://minio:9000/bucket` would be bucket `minio`.
        if matches!(parsed.scheme(), "s3" | "s3a" | "gs")
            && (parsed.port().is_some()
                || !parsed.username().is_empty()
                || parsed.password().is_some())
        {
            let server = if parsed.scheme() == "gs" {
                ""
            } else {
                ", and name a server of your own with --storage-option aws_endpoint_url=http://HOST:PORT (storage_options in Python)"
            };
            return Err(bad(format!(
                "a {}:// URL names a bucket, not a server: no port or user in it; write {}://BUCKET/PREFIX{server}",
                parsed.scheme(),
                parsed.scheme()
            )));
        }
        // Before the trailing slashes go: `s3://b/ds//` is refused as
        // `s3://b/ds//x` is, by every command alike.
        if let Some(what) = url::Url::parse(url).ok().as_ref().and_then(empty_segment) {
            return Err(bad(what));
        }
        let (scheme, prefix) = ObjectStoreScheme::parse(&parsed).map_err(|e| {
            bad(format!(
                "not an object-storage URL bale can read ({e}); it reads s3://, gs://, az:// and https:// URLs"
            ))
        })?;
        if matches!(scheme, ObjectStoreScheme::Local | ObjectStoreScheme::Memory) {
            return Err(bad("not an object-storage URL".into()));
        }
        // `s3a://` is `s3://` (Hadoop's spelling): one bucket, one client,
        // and server-side copies between the two.
        let scheme_name = match parsed.scheme() {
            "s3a" => "s3",
            other => other,
        };
        let authority = format!(
            "{}://{}{}",
            scheme_name,
            parsed.host_str().unwrap_or(""),
            parsed.port().map(|p| format!(":{p}")).unwrap_or_default()
        );
        let key = format!("{scheme:?}|{authority}|{}", options.fingerprint());
        let store = Store {
            inner: Arc::new(StoreInner {
                url: trimmed.to_owned(),
                parsed,
                scheme,
                prefix,
                options: options.clone(),
                key,
            }),
        };
        // Builds the client now: a bad option or credential setting is an
        // error here, not at the first read.
        store.client()?;
        Ok(store)
    }

    /// The URL, as given (without a trailing `/`).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The options it was opened with.
    pub fn options(&self) -> &StorageOptions {
        &self.inner.options
    }

    /// Whether the client sends a DELETE of many objects as one request
    /// (S3's DeleteObjects, unless `aws_disable_bulk_delete` turns it off
    /// in the options or the environment), not one request per object.
    pub(crate) fn deletes_in_one_request(&self) -> bool {
        // Any value but a false one turns them off (read as the client
        // reads a flag; one it cannot read counts as on, to be safe).
        let set = |v: &str| {
            !matches!(
                v.to_ascii_lowercase().as_str(),
                "0" | "false" | "off" | "no" | "n"
            )
        };
        let inner = &self.inner;
        matches!(inner.scheme, ObjectStoreScheme::AmazonS3)
            && !["aws_disable_bulk_delete", "disable_bulk_delete"]
                .iter()
                .any(|k| inner.options.get(k).is_some_and(set))
            && !std::env::var("AWS_DISABLE_BULK_DELETE").is_ok_and(|v| set(&v))
    }

    pub(crate) fn client(&self) -> Result<Arc<dyn ObjectStore>> {
        let inner = &self.inner;
        runtime::client(&inner.key, || {
            build_client(&inner.parsed, inner.scheme.clone(), &inner.options)
        })
    }

    /// A client that never sends a request again by itself: for requests
    /// whose every attempt the caller must know of (a DELETE whose first
    /// attempt, cut off, may still land after a second one was answered).
    pub(crate) fn client_without_retries(&self) -> Result<Arc<dyn ObjectStore>> {
        self.client_once(false)
    }

    /// The same as [`Store::client_without_retries`], sending one DELETE
    /// per object (S3 only: `aws_disable_bulk_delete`).
    pub(crate) fn client_single_deletes(&self) -> Result<Arc<dyn ObjectStore>> {
        self.client_once(true)
    }

    /// A client with `max_retries` 0 (and, `single`, bulk deletes off),
    /// made once per configuration.
    fn client_once(&self, single: bool) -> Result<Arc<dyn ObjectStore>> {
        let inner = &self.inner;
        let mut options = inner.options.clone();
        options.set("max_retries", "0");
        if single {
            options.set("aws_disable_bulk_delete", "true");
        }
        let tag = if single { "once-single" } else { "once" };
        runtime::client(&format!("{}\u{3}{tag}", inner.key), || {
            build_client(&inner.parsed, inner.scheme.clone(), &options)
        })
    }

    /// The client for multipart uploads (made anew: a writer makes one per
    /// run); `None` for `https://`, which takes no multipart uploads.
    pub(crate) fn multipart_client(&self) -> Result<Option<crate::options::Writer>> {
        let inner = &self.inner;
        runtime::enter(|| {
            crate::options::build_multipart(&inner.parsed, inner.scheme.clone(), &inner.options)
        })?
    }

    /// Whether `other` is reached with the same client (scheme, bucket or
    /// host, options): a server-side copy works between the two.
    pub fn same_client(&self, other: &Store) -> bool {
        self.inner.key == other.inner.key
    }

    /// The prefix, as an `object_store` path.
    pub(crate) fn prefix(&self) -> &ObjPath {
        &self.inner.prefix
    }

    /// The object `name` under the prefix: a path relative to it, with `/`
    /// between parts, as a manifest names shards and indexes.
    ///
    /// # Errors
    /// [`StorageError::BadUrl`] for an absolute name, or one with an empty,
    /// `.` or `..` part: a remote dataset names only objects under its prefix.
    pub fn object(&self, name: &str) -> Result<Object> {
        let url = format!("{}/{name}", self.inner.url);
        let parts: Vec<&str> = name.split('/').collect();
        if name.starts_with('/')
            || parts
                .iter()
                .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(StorageError::BadUrl {
                url,
                what: format!(
                    "{name:?} is not a plain relative name: a dataset in object storage names only objects under its own prefix"
                ),
            });
        }
        let path: ObjPath = self
            .inner
            .prefix
            .parts()
            .chain(parts.into_iter().map(PathPart::from))
            .collect();
        Ok(Object {
            store: self.clone(),
            path,
            url,
            size: None,
            etag: Arc::new(OnceLock::new()),
        })
    }
}

/// One object: a manifest, an index or a shard.
///
/// With [`Object::expect_size`], every answer is checked against that size,
/// and the object's ETag is remembered from the first answer: an object
/// replaced between two reads is an error, not a mix of two versions.
#[derive(Clone)]
pub struct Object {
    store: Store,
    path: ObjPath,
    url: String,
    size: Option<u64>,
    etag: Arc<OnceLock<Option<String>>>,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("url", &self.url)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Object {
    /// The object's path in its bucket.
    pub(crate) fn obj_path(&self) -> &ObjPath {
        &self.path
    }

    /// The object's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL as a path, for errors that name a file.
    pub fn path_buf(&self) -> PathBuf {
        PathBuf::from(&self.url)
    }

    /// The size every answer is checked against, if set.
    pub fn expected_size(&self) -> Option<u64> {
        self.size
    }

    /// Checks every later answer against `size` (the manifest's or index's figure).
    pub fn expect_size(mut self, size: u64) -> Self {
        self.size = Some(size);
        self
    }

    fn check_meta(&self, meta: &object_store::ObjectMeta) -> Result<()> {
        if let Some(want) = self.size
            && meta.size != want
        {
            return Err(StorageError::Changed {
                url: self.url.clone(),
                what: format!(
                    "the object has {} bytes, the dataset records {want}: it was replaced or is damaged",
                    meta.size
                ),
            });
        }
        let first = self.etag.get_or_init(|| meta.e_tag.clone());
        if let (Some(a), Some(b)) = (first, &meta.e_tag)
            && a != b
        {
            return Err(StorageError::Changed {
                url: self.url.clone(),
                what: format!("the object changed while it was being read (ETag {a} became {b})"),
            });
        }
        Ok(())
    }

    /// Its size, from a HEAD request.
    ///
    /// # Errors
    /// [`StorageError::NotFound`] and the other request errors.
    pub fn head(&self) -> Result<u64> {
        let (client, path, url) = (self.store.client()?, self.path.clone(), self.url.clone());
        let meta = runtime::block_on(async move { client.head(&path).await })?
            .map_err(|e| from_object_store(&url, None, e))?;
        Ok(meta.size)
    }

    /// Bytes `range` of the object: one ranged GET.
    ///
    /// # Errors
    /// Request errors naming the URL, range and status; a short answer or a
    /// size other than [`Object::expect_size`]'s.
    pub fn get_range(&self, range: Range<u64>) -> Result<Bytes> {
        let fut = self.fetch(range)?;
        runtime::block_on(fut)?
    }

    /// Starts reading `range` in the background.
    ///
    /// # Errors
    /// [`StorageError::Runtime`] when the runtime cannot start.
    pub fn start_range(&self, range: Range<u64>) -> Result<Pending<Result<Bytes>>> {
        Pending::spawn(self.fetch(range)?)
    }

    /// The future that reads `range`.
    pub(crate) fn fetch(&self, range: Range<u64>) -> Result<BoxFuture<'static, Result<Bytes>>> {
        let client = self.store.client()?;
        let this = self.clone();
        Ok(Box::pin(async move {
            let want = range.end - range.start;
            if want == 0 {
                return Ok(Bytes::new());
            }
            let opts = GetOptions {
                range: Some(GetRange::Bounded(range.clone())),
                ..GetOptions::default()
            };
            let err = |e| from_object_store(&this.url, Some(range.clone()), e);
            let got = client.get_opts(&this.path, opts).await.map_err(err)?;
            this.check_meta(&got.meta)?;
            let bytes = got.bytes().await.map_err(err)?;
            if bytes.len() as u64 != want {
                return Err(StorageError::Request {
                    url: this.url.clone(),
                    range: Some(range),
                    status: None,
                    what: format!(
                        "the server sent {} bytes for a range of {want}: the object is shorter than the dataset records",
                        bytes.len()
                    ),
                });
            }
            Ok(bytes)
        }))
    }

    /// The whole object, when its size lies in `min..=max` (checked from
    /// the answer's headers before its body is read: a huge or foreign
    /// object costs one request, not its bytes).
    ///
    /// # Errors
    /// [`StorageError::TooLarge`] above `max`; [`StorageError::Changed`]
    /// below `min`; request errors.
    pub fn get_sized(&self, min: u64, max: u64, what: &'static str) -> Result<Bytes> {
        runtime::block_on(self.sized(min, max, what)?)?
    }

    /// The future of [`Object::get_sized`].
    pub(crate) fn sized(
        &self,
        min: u64,
        max: u64,
        what: &'static str,
    ) -> Result<BoxFuture<'static, Result<Bytes>>> {
        let client = self.store.client()?;
        let this = self.clone();
        Ok(Box::pin(async move {
            let err = |e| from_object_store(&this.url, None, e);
            let got = client
                .get_opts(&this.path, GetOptions::default())
                .await
                .map_err(err)?;
            let len = got.meta.size;
            if len > max {
                return Err(StorageError::TooLarge {
                    url: this.url.clone(),
                    len,
                    cap: max,
                    what,
                });
            }
            if len < min {
                return Err(StorageError::Changed {
                    url: this.url.clone(),
                    what: format!("the {what} has {len} bytes, at least {min} are needed"),
                });
            }
            this.check_meta(&got.meta)?;
            let mut stream = got.into_stream();
            let mut out = Vec::with_capacity(len as usize);
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(err)?;
                if out.len() as u64 + chunk.len() as u64 > len {
                    return Err(StorageError::Changed {
                        url: this.url.clone(),
                        what: format!("the server sent more than the {len} bytes it announced"),
                    });
                }
                out.extend_from_slice(&chunk);
            }
            if out.len() as u64 != len {
                return Err(StorageError::Changed {
                    url: this.url.clone(),
                    what: format!(
                        "the server sent {} of the {len} bytes it announced",
                        out.len()
                    ),
                });
            }
            Ok(Bytes::from(out))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_a_parser_would_change_are_refused_before_any_request() {
        for bad in [
            "s3://b/vic\ntim",
            "s3://b/new\tone",
            "s3://b/a\u{1b}b",
            "s3://b/parts/zz/../p1",
            "s3://b/parts/./p1",
            "s3://b/parts/%2E%2e/p1",
            "s3://b/..",
            "http://h/bkt/zz\\..\\ds",
            "s3://b/a\\b",
            "gs://b/x/..",
            "s3://b/parts/p0%2F",
            "s3://b/cv%2fx",
        ] {
            let e = Store::open(bad, &StorageOptions::default())
                .err()
                .unwrap_or_else(|| panic!("{bad:?} was taken"));
            assert!(
                matches!(&e, StorageError::BadUrl { what, .. }
                    if what.contains("control character") || what.contains("segment")
                        || what.contains("backslash") || what.contains("%2F")),
                "{bad:?}: {e}"
            );
        }
        for good in [
            "s3://b/ds",
            "s3://b/ds/",
            "s3://b/a..b/c.d",
            "http://[::1]:9000/b/x",
            "s3://b/.bale/x",
        ] {
            assert!(check_url_text(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn a_bucket_url_with_a_server_or_an_empty_segment_is_refused() {
        for (bad, says) in [
            ("s3://minio:9000/bucket/ds", "names a bucket, not a server"),
            ("s3://user@bkt/ds", "names a bucket, not a server"),
            ("gs://bkt:80/ds", "names a bucket, not a server"),
            ("s3://bkt//ds", "empty path segment"),
            ("s3://bkt/ds//part", "empty path segment"),
            ("s3://bkt/ds//", "empty path segment"),
            ("https://host/data//ds", "empty path segment"),
        ] {
            match Store::open(bad, &StorageOptions::default()) {
                Err(StorageError::BadUrl { url, what }) => {
                    assert_eq!(url, bad);
                    assert!(what.contains(says), "{bad}: {what}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        // An object's URL too: `ds//x.tar` is not `ds/x.tar`.
        match crate::object_at("s3://bkt/ds//shard-000000.tar", &StorageOptions::default()) {
            Err(StorageError::BadUrl { what, .. }) => assert!(what.contains("empty path segment")),
            other => panic!("{other:?}"),
        }
        assert!(Store::open("s3://bkt/ds/", &StorageOptions::default()).is_ok());
    }

    #[test]
    fn an_object_is_recognised_under_every_spelling_of_its_url() {
        let key = object_key("s3://bkt/ds3/shard-000000.tar").unwrap();
        assert_eq!(key, "ds3/shard-000000.tar");
        for same in [
            "s3://bkt/ds3/shard-000000.tar",
            "s3a://bkt/ds3/shard-000000.tar/",
            "s3://bkt/d%733/shard-000000.tar",
            "http://127.0.0.1:8333/bkt/ds3/shard-000000.tar",
            "https://bkt.s3.eu-west-1.amazonaws.com/ds3/shard-000000.tar",
            "https://s3.amazonaws.com/bkt/ds3/shard-000000.tar",
            // Another bucket with the same key: refused too, on the safe side.
            "gs://other/ds3/shard-000000.tar",
        ] {
            assert!(may_name_object(same, &key), "{same}");
        }
        for other in [
            "s3://bkt/ds3/shard-000001.tar",
            "s3://bkt/xds3/shard-000000.tar",
            "s3://bkt/ds3/shard-000000.tar.idx",
            "not a url",
        ] {
            assert!(!may_name_object(other, &key), "{other}");
        }
    }
}
