//! A batch as the loader returns it, and the pool its image buffers come
//! from and go back to.

use std::sync::{Arc, Mutex};

use half::f16;

use crate::options::Dtype;

/// The images of a batch: `shape` elements of `dtype`, in one buffer that
/// goes back to the loader's pool when dropped.
#[derive(Debug)]
pub struct Images {
    pub(crate) data: ImageData,
    pub(crate) shape: [usize; 4],
    pool: Option<Arc<BufferPool>>,
}

/// The elements of [`Images`], by type.
#[derive(Debug)]
pub enum ImageData {
    /// `uint8`.
    U8(Vec<u8>),
    /// `float32`.
    F32(Vec<f32>),
    /// `float16`.
    F16(Vec<f16>),
}

impl ImageData {
    fn len(&self) -> usize {
        match self {
            ImageData::U8(v) => v.len(),
            ImageData::F32(v) => v.len(),
            ImageData::F16(v) => v.len(),
        }
    }

    /// The elements as bytes (native byte order).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            ImageData::U8(v) => v,
            // SAFETY: f32 and f16 are plain 4- and 2-byte values; any bit
            // pattern is a valid u8 and u8 has no alignment requirement.
            ImageData::F32(v) => unsafe {
                std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(&v[..]))
            },
            // SAFETY: as above.
            ImageData::F16(v) => unsafe {
                std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(&v[..]))
            },
        }
    }
}

impl Images {
    /// `(batch, height, width, 3)`, or `(batch, 3, height, width)` with `channels_first`.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        match self.data {
            ImageData::U8(_) => Dtype::U8,
            ImageData::F32(_) => Dtype::F32,
            ImageData::F16(_) => Dtype::F16,
        }
    }

    /// The elements.
    pub fn data(&self) -> &ImageData {
        &self.data
    }

    /// The `uint8` elements, if that is the type.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.data {
            ImageData::U8(v) => Some(v),
            _ => None,
        }
    }

    /// The `float32` elements, if that is the type.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            ImageData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.as_bytes()
    }

    /// Drops the images from `keep` on (a batch shortened by skipped samples).
    pub(crate) fn truncate(&mut self, keep: usize) {
        let per = self.shape[1] * self.shape[2] * self.shape[3];
        match &mut self.data {
            ImageData::U8(v) => v.truncate(keep * per),
            ImageData::F32(v) => v.truncate(keep * per),
            ImageData::F16(v) => v.truncate(keep * per),
        }
        self.shape[0] = keep;
    }

    /// Moves image `from` over image `to` (`to < from`), compacting a batch.
    pub(crate) fn move_image(&mut self, from: usize, to: usize) {
        let per = self.shape[1] * self.shape[2] * self.shape[3];
        match &mut self.data {
            ImageData::U8(v) => v.copy_within(from * per..(from + 1) * per, to * per),
            ImageData::F32(v) => v.copy_within(from * per..(from + 1) * per, to * per),
            ImageData::F16(v) => v.copy_within(from * per..(from + 1) * per, to * per),
        }
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let data = std::mem::replace(&mut self.data, ImageData::U8(Vec::new()));
            pool.put(data);
        }
    }
}

/// A sample left out of its batch (`OnError::Skip`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its global index.
    pub index: u64,
    /// Its key.
    pub key: String,
    /// Why.
    pub error: String,
}

/// One batch.
#[derive(Debug)]
pub struct Batch {
    /// The images.
    pub images: Images,
    /// Each image's `.cls` label (-1 for a sample without one).
    pub labels: Vec<i64>,
    /// Each image's global sample index.
    pub indices: Vec<u64>,
    /// The members asked for with [`crate::LoaderOptions::fields`], per
    /// field, one entry per image (`None` where a sample lacks it).
    pub fields: Vec<(String, Vec<Option<Vec<u8>>>)>,
    /// Samples left out of this batch (`OnError::Skip`).
    pub skipped: Vec<Skipped>,
}

impl Batch {
    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the batch holds no image (every sample skipped).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// Image buffers kept for reuse: a batch's buffer comes back when its
/// [`Images`] is dropped, so a steady loop allocates nothing. Bounded: at
/// most [`BufferPool::KEEP`] idle buffers are kept.
#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<ImageData>>,
}

impl BufferPool {
    /// Idle buffers kept.
    const KEEP: usize = 8;

    /// A buffer of `len` elements of `dtype` (contents unspecified).
    pub fn take(self: &Arc<Self>, dtype: Dtype, len: usize, shape: [usize; 4]) -> Images {
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            let at = free.iter().position(|d| {
                matches!(
                    (d, dtype),
                    (ImageData::U8(_), Dtype::U8)
                        | (ImageData::F32(_), Dtype::F32)
                        | (ImageData::F16(_), Dtype::F16)
                )
            });
            at.map(|i| free.swap_remove(i))
        };
        let mut data = reused.unwrap_or_else(|| match dtype {
            Dtype::U8 => ImageData::U8(Vec::new()),
            Dtype::F32 => ImageData::F32(Vec::new()),
            Dtype::F16 => ImageData::F16(Vec::new()),
        });
        match &mut data {
            ImageData::U8(v) => v.resize(len, 0),
            ImageData::F32(v) => v.resize(len, 0.0),
            ImageData::F16(v) => v.resize(len, f16::ZERO),
        }
        debug_assert_eq!(data.len(), len);
        Images {
            data,
            shape,
            pool: Some(Arc::clone(self)),
        }
    }

    fn put(&self, data: ImageData) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < Self::KEEP && data.len() > 0 {
            free.push(data);
        }
    }
}
