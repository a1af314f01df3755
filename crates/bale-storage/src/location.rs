//! Where a dataset is: a local directory or a URL.

use std::path::{Path, PathBuf};

use crate::error::{Result, StorageError};

/// URL schemes bale reads, and what they mean.
pub const SCHEMES: &[(&str, &str)] = &[
    (
        "s3",
        "Amazon S3 or an S3-compatible server (AWS_ENDPOINT_URL)",
    ),
    ("s3a", "Amazon S3 (Hadoop's name)"),
    ("gs", "Google Cloud Storage"),
    ("az", "Azure Blob Storage"),
    ("abfs", "Azure Data Lake Storage Gen2"),
    ("abfss", "Azure Data Lake Storage Gen2 over TLS"),
    ("azure", "Azure Blob Storage"),
    (
        "https",
        "any HTTP(S) server that answers ranged GETs (read-only)",
    ),
    (
        "http",
        "any HTTP server that answers ranged GETs (read-only; needs allow_http)",
    ),
];

/// A dataset's location: a local path or an object-storage URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local directory (or file).
    Local(PathBuf),
    /// A URL (`s3://bucket/prefix`, `gs://`, `az://`, `https://`), as given.
    Url(String),
}

/// The scheme of `s` when it looks like a URL (`<letters>://...`).
pub fn url_scheme(s: &str) -> Option<&str> {
    let (scheme, _) = s.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

impl Location {
    /// Reads a path or URL as typed: `scheme://...` is a URL (a local
    /// directory whose name looks like one is reached as `./s3:/...`);
    /// `file://` URLs are local paths.
    ///
    /// # Errors
    /// [`StorageError::BadUrl`] for a scheme bale does not read, naming the ones it does.
    ///
    /// ```
    /// use bale_storage::Location;
    /// assert_eq!(Location::parse("s3://b/ds".as_ref())?, Location::Url("s3://b/ds".into()));
    /// assert_eq!(Location::parse("data/ds".as_ref())?, Location::Local("data/ds".into()));
    /// assert!(Location::parse("ftp://h/ds".as_ref()).is_err());
    /// # Ok::<(), bale_storage::StorageError>(())
    /// ```
    pub fn parse(p: &Path) -> Result<Location> {
        let Some(s) = p.to_str() else {
            return Ok(Location::Local(p.to_path_buf()));
        };
        let Some(scheme) = url_scheme(s) else {
            // `s3:/bkt/ds` (a slash missing) would be a local folder `s3:`.
            if let Some((first, _)) = s.split_once(':')
                && SCHEMES.iter().any(|(k, _)| k.eq_ignore_ascii_case(first))
            {
                return Err(StorageError::BadUrl {
                    url: s.to_owned(),
                    what: format!(
                        "a URL is written {first}://BUCKET/PREFIX (two slashes); a local folder named {first}: is reached as ./{s}"
                    ),
                });
            }
            return Ok(Location::Local(p.to_path_buf()));
        };
        let lower = scheme.to_ascii_lowercase();
        if lower == "file" {
            let rest = &s[scheme.len() + 3..];
            return Ok(Location::Local(PathBuf::from(if rest.starts_with('/') {
                rest.to_owned()
            } else {
                format!("/{rest}")
            })));
        }
        if SCHEMES.iter().any(|(k, _)| *k == lower) {
            return Ok(Location::Url(s.to_owned()));
        }
        let known: Vec<&str> = SCHEMES.iter().map(|(k, _)| *k).collect();
        Err(StorageError::BadUrl {
            url: s.to_owned(),
            what: format!(
                "unsupported URL scheme {scheme:?}; bale reads {}:// URLs and local paths",
                known.join("://, ")
            ),
        })
    }

    /// Whether this is a URL.
    pub fn is_url(&self) -> bool {
        matches!(self, Location::Url(_))
    }
}

/// Whether `p` is written as a URL bale reads (see [`Location::parse`]).
pub fn is_url(p: &Path) -> bool {
    matches!(Location::parse(p), Ok(Location::Url(_)) | Err(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_with_a_slash_missing_is_refused_and_a_dotted_path_is_local() {
        for typo in ["s3:/bkt/ds", "S3:/bkt/ds", "gs:bkt/ds", "https:/host/x"] {
            match Location::parse(Path::new(typo)) {
                Err(StorageError::BadUrl { what, .. }) => {
                    assert!(what.contains("two slashes"), "{typo}: {what}")
                }
                other => panic!("{typo}: {other:?}"),
            }
        }
        for local in ["./s3:/bkt/ds", "data/s3:/x", "notes:2024", "ds"] {
            assert!(
                matches!(Location::parse(Path::new(local)), Ok(Location::Local(_))),
                "{local}"
            );
        }
        assert!(matches!(
            Location::parse(Path::new("s3://bkt/ds")),
            Ok(Location::Url(_))
        ));
    }
}
