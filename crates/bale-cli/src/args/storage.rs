//! `--storage-option KEY=VALUE`, shared by the commands that read a dataset.

use bale_storage::StorageOptions;

/// Options for datasets in object storage.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StorageArgs {
    /// An option for object storage, on top of the standard environment
    /// (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...); repeatable. Keys:
    /// aws_endpoint_url, aws_region, aws_access_key_id, allow_http, timeout,
    /// connect_timeout, max_retries, retry_timeout, and the other keys of the
    /// object_store crate (docs/remote.md).
    #[arg(
        long = "storage-option",
        value_name = "KEY=VALUE",
        help_heading = "Object storage"
    )]
    pub storage_option: Vec<String>,
}

impl StorageArgs {
    /// The options, installed for every file opened by path (the scan and
    /// the checks read URLs through them).
    ///
    /// # Errors
    /// An option that is not `KEY=VALUE`.
    pub fn options(&self) -> Result<StorageOptions, bale_storage::StorageError> {
        let mut o = StorageOptions::new();
        for pair in &self.storage_option {
            o.set_pair(pair)?;
        }
        bale_storage::install_url_opener(&o);
        Ok(o)
    }
}
