//! The open multipart uploads under a prefix in S3 (`ListMultipartUploads`),
//! which `object_store` does not list: a run killed between starting an
//! upload and recording it leaves one that only this listing finds, and
//! `--force` on the rerun aborts it.

use object_store::ClientOptions;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsAuthorizer, AwsCredentialProvider};
use object_store::client::{HttpConnector, HttpRequestBody, ReqwestConnector};

use crate::error::{Result, StorageError};

/// What listing the open uploads of one bucket takes.
#[derive(Clone)]
pub(crate) struct S3Lister {
    endpoint: Option<String>,
    region: String,
    bucket: String,
    virtual_hosted: bool,
    allow_http: bool,
    credentials: Option<AwsCredentialProvider>,
}

impl std::fmt::Debug for S3Lister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Lister")
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

/// One open upload: the object's key and the upload's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenUpload {
    pub key: String,
    pub id: String,
}

impl S3Lister {
    pub(crate) fn from_builder(b: &AmazonS3Builder, url: &url::Url) -> S3Lister {
        let get = |k: AmazonS3ConfigKey| b.get_config_value(&k);
        S3Lister {
            endpoint: get(AmazonS3ConfigKey::Endpoint),
            region: get(AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".into()),
            // `s3://bucket/...`: the builder learns the bucket from the URL only when it builds.
            bucket: get(AmazonS3ConfigKey::Bucket)
                .filter(|b| !b.is_empty())
                .or_else(|| url.host_str().map(str::to_owned))
                .unwrap_or_default(),
            virtual_hosted: get(AmazonS3ConfigKey::VirtualHostedStyleRequest)
                .is_some_and(|v| v == "true"),
            allow_http: get(AmazonS3ConfigKey::Client(
                object_store::ClientConfigKey::AllowHttp,
            ))
            .is_some_and(|v| v == "true"),
            credentials: None,
        }
    }

    pub(crate) fn with_credentials(mut self, c: AwsCredentialProvider) -> S3Lister {
        self.credentials = Some(c);
        self
    }

    /// The bucket's URL, as `object_store` reaches it.
    fn bucket_url(&self) -> String {
        match (&self.endpoint, self.virtual_hosted) {
            (Some(e), true) => e.trim_end_matches('/').to_owned(),
            (Some(e), false) => format!("{}/{}", e.trim_end_matches('/'), self.bucket),
            (None, true) => format!("https://{}.s3.{}.amazonaws.com", self.bucket, self.region),
            (None, false) => format!("https://s3.{}.amazonaws.com/{}", self.region, self.bucket),
        }
    }

    /// Every open upload whose key starts with `prefix`.
    pub(crate) async fn list(&self, prefix: &str) -> Result<Vec<OpenUpload>> {
        let base = self.bucket_url();
        let fail = |what: String| StorageError::Request {
            url: format!("{base} (ListMultipartUploads {prefix})"),
            range: None,
            status: None,
            what,
        };
        let provider = self
            .credentials
            .as_ref()
            .ok_or_else(|| fail("no credentials".into()))?;
        let credential = provider
            .get_credential()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let client = ReqwestConnector::default()
            .connect(&ClientOptions::new().with_allow_http(self.allow_http))
            .map_err(|e| fail(e.to_string()))?;
        let mut out = Vec::new();
        let mut markers: Option<(String, String)> = None;
        for _ in 0..10_000 {
            let mut query = vec![
                ("prefix".to_owned(), prefix.to_owned()),
                ("uploads".to_owned(), String::new()),
            ];
            if let Some((k, u)) = &markers {
                query.push(("key-marker".into(), k.clone()));
                query.push(("upload-id-marker".into(), u.clone()));
            }
            query.sort();
            let q: Vec<String> = query
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            let url = format!("{base}/?{}", q.join("&"));
            let mut request = http::Request::builder()
                .method("GET")
                .uri(&url)
                .body(HttpRequestBody::empty())
                .map_err(|e| fail(e.to_string()))?;
            AwsAuthorizer::new(&credential, "s3", &self.region)
                .try_authorize(&mut request, None)
                .map_err(|e| fail(e.to_string()))?;
            let response = client
                .execute(request)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let status = response.status();
            let body = response
                .into_body()
                .bytes()
                .await
                .map_err(|e| fail(e.to_string()))?;
            let text = String::from_utf8_lossy(&body);
            if !status.is_success() {
                return Err(StorageError::Request {
                    url: format!("{base} (ListMultipartUploads {prefix})"),
                    range: None,
                    status: Some(status.as_u16()),
                    what: format!(
                        "HTTP {status}: {}",
                        text.chars().take(300).collect::<String>()
                    ),
                });
            }
            for block in elements(&text, "Upload") {
                if let (Some(key), Some(id)) = (
                    elements(block, "Key").next(),
                    elements(block, "UploadId").next(),
                ) {
                    out.push(OpenUpload {
                        key: unescape(key),
                        id: unescape(id),
                    });
                }
            }
            let truncated = elements(&text, "IsTruncated").next() == Some("true");
            let next = (
                elements(&text, "NextKeyMarker").next().map(unescape),
                elements(&text, "NextUploadIdMarker").next().map(unescape),
            );
            match (truncated, next) {
                (true, (Some(k), Some(u))) if markers.as_ref() != Some(&(k.clone(), u.clone())) => {
                    markers = Some((k, u));
                }
                _ => break,
            }
        }
        Ok(out)
    }
}

/// RFC 3986 encoding as SigV4 wants it: unreserved characters as they are.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The contents of each `<tag>...</tag>` element in `xml` (not nested in themselves).
fn elements<'a>(xml: &'a str, tag: &str) -> impl Iterator<Item = &'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut rest = xml;
    std::iter::from_fn(move || {
        let start = rest.find(&open)? + open.len();
        let len = rest[start..].find(&close)?;
        let inner = &rest[start..start + len];
        rest = &rest[start + len + close.len()..];
        Some(inner)
    })
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn escape(s: &str) -> String {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&apos;")
    }

    proptest! {
        /// The server's answer is untrusted: any text parses without a panic.
        #[test]
        fn any_answer_parses_without_panicking(xml in ".{0,400}") {
            for b in elements(&xml, "Upload") {
                let _ = elements(b, "Key").next().map(unescape);
            }
            let _ = elements(&xml, "IsTruncated").next();
        }

        /// Keys and ids written as S3 escapes them come back as they were.
        #[test]
        fn escaped_keys_and_ids_round_trip(
            uploads in proptest::collection::vec(("[^\\x00]{1,40}", "[A-Za-z0-9._~-]{1,60}"), 0..6)
        ) {
            let mut xml = String::from("<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>");
            for (k, id) in &uploads {
                xml += &format!("<Upload><Key>{}</Key><UploadId>{}</UploadId></Upload>", escape(k), escape(id));
            }
            xml += "</ListMultipartUploadsResult>";
            let got: Vec<(String, String)> = elements(&xml, "Upload")
                .map(|b| (unescape(elements(b, "Key").next().unwrap()), unescape(elements(b, "UploadId").next().unwrap())))
                .collect();
            prop_assert_eq!(got, uploads);
        }
    }

    #[test]
    fn the_listing_is_read_from_s3s_xml() {
        let xml = "<ListMultipartUploadsResult><Bucket>b</Bucket><IsTruncated>false</IsTruncated>\
            <Upload><Key>ds/shard-000001.tar</Key><UploadId>a&amp;b</UploadId></Upload>\
            <Upload><Key>ds/x&lt;1&gt;</Key><UploadId>2</UploadId></Upload></ListMultipartUploadsResult>";
        let got: Vec<(String, String)> = elements(xml, "Upload")
            .map(|b| {
                (
                    unescape(elements(b, "Key").next().unwrap()),
                    unescape(elements(b, "UploadId").next().unwrap()),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("ds/shard-000001.tar".to_owned(), "a&b".to_owned()),
                ("ds/x<1>".to_owned(), "2".to_owned())
            ]
        );
        assert_eq!(elements(xml, "IsTruncated").next(), Some("false"));
        assert_eq!(encode("ds/a b~"), "ds%2Fa%20b~");
    }
}
