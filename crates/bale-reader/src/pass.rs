//! A pass over every sample in order whose resident memory does not grow
//! with the dataset: [`Pass`].

use crate::dataset::Dataset;

/// Samples a [`Pass`] reads between two releases of the shard it is in.
pub const RELEASE_SAMPLES: u64 = 8192;
/// Bytes of samples a [`Pass`] reads between two releases (their tar
/// ranges, headers included).
pub const RELEASE_BYTES: u64 = 32 << 20;

/// Keeps a pass over the samples in order (`bale stat`, `bale ls`) at a
/// bounded resident memory: the pages of a mapped shard and of its index
/// that the pass touched are dropped from the process ([`Dataset::release`])
/// when it leaves the shard, and within a shard after every
/// [`RELEASE_SAMPLES`] samples or [`RELEASE_BYTES`] bytes of them. Without
/// it, a pass over a local dataset ends with every page of it mapped into
/// the process: resident memory the size of the dataset. The pages stay in
/// the page cache; only the process stops holding them.
#[derive(Debug)]
pub struct Pass<'a> {
    dataset: &'a Dataset,
    shard: Option<usize>,
    samples: u64,
    bytes: u64,
}

impl<'a> Pass<'a> {
    /// A pass over `dataset`.
    pub fn new(dataset: &'a Dataset) -> Self {
        Pass {
            dataset,
            shard: None,
            samples: 0,
            bytes: 0,
        }
    }

    /// Notes that the pass is about to read sample `i`, releasing what it
    /// read before when it is time to.
    ///
    /// # Errors
    /// [`crate::ReaderError::IndexOutOfRange`] for `i` past the end.
    pub fn read(&mut self, i: u64) -> crate::Result<()> {
        let (s, local) = self.dataset.locate(i)?;
        if self.shard.is_some_and(|cur| cur != s)
            || self.samples >= RELEASE_SAMPLES
            || self.bytes >= RELEASE_BYTES
        {
            self.release();
        }
        self.shard = Some(s);
        self.samples += 1;
        // Its bytes in the shard, tar headers and padding included.
        let bytes = self.dataset.sample_cost(s, local);
        self.bytes = self.bytes.saturating_add(bytes);
        Ok(())
    }

    fn release(&mut self) {
        if let Some(s) = self.shard.take() {
            self.dataset.release(s);
        }
        self.samples = 0;
        self.bytes = 0;
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.release();
    }
}
