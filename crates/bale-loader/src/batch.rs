//! A batch as the loader returns it: [`Array`]s of images, labels, masks
//! and boxes, each one buffer that goes back to the loader's pool when
//! dropped, and the pool.

use std::sync::{Arc, Mutex};

use half::f16;

use crate::error::{LoaderError, Result};

/// The element type of an [`Array`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Element {
    /// `uint8`.
    U8,
    /// `int64`.
    I64,
    /// `float32`.
    F32,
    /// `float16`.
    F16,
}

impl Element {
    /// NumPy's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Element::U8 => "uint8",
            Element::I64 => "int64",
            Element::F32 => "float32",
            Element::F16 => "float16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Element::U8 => 1,
            Element::F16 => 2,
            Element::F32 => 4,
            Element::I64 => 8,
        }
    }
}

/// The elements of an [`Array`], by type.
#[derive(Debug)]
pub enum Elements {
    /// `uint8`.
    U8(Vec<u8>),
    /// `int64`.
    I64(Vec<i64>),
    /// `float32`.
    F32(Vec<f32>),
    /// `float16`.
    F16(Vec<f16>),
}

impl Elements {
    fn len(&self) -> usize {
        match self {
            Elements::U8(v) => v.len(),
            Elements::I64(v) => v.len(),
            Elements::F32(v) => v.len(),
            Elements::F16(v) => v.len(),
        }
    }

    fn element(&self) -> Element {
        match self {
            Elements::U8(_) => Element::U8,
            Elements::I64(_) => Element::I64,
            Elements::F32(_) => Element::F32,
            Elements::F16(_) => Element::F16,
        }
    }

    /// The elements as bytes (native byte order).
    pub fn as_bytes(&self) -> &[u8] {
        fn bytes<T>(v: &[T]) -> &[u8] {
            // SAFETY: the element types are plain numbers: any byte of them
            // is a valid u8, and u8 has no alignment requirement.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        }
        match self {
            Elements::U8(v) => v,
            Elements::I64(v) => bytes(v),
            Elements::F32(v) => bytes(v),
            Elements::F16(v) => bytes(v),
        }
    }

    /// The address of the first element.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Elements::U8(v) => v.as_mut_ptr(),
            Elements::I64(v) => v.as_mut_ptr().cast(),
            Elements::F32(v) => v.as_mut_ptr().cast(),
            Elements::F16(v) => v.as_mut_ptr().cast(),
        }
    }
}

/// An n-dimensional array of a batch (images, masks, labels, boxes): its
/// elements in C order, in one buffer that goes back to the loader's pool
/// when dropped.
#[derive(Debug)]
pub struct Array {
    pub(crate) data: Elements,
    shape: [usize; 4],
    ndim: usize,
    pool: Option<Arc<BufferPool>>,
}

impl Array {
    /// The shape: images `(batch, height, width, 3)` (or `(batch, 3,
    /// height, width)` with `channels_first`), masks `(batch, height,
    /// width)`, labels `(batch,)` or `(batch, classes)`, boxes `(batch,
    /// max_boxes, 4)`.
    pub fn shape(&self) -> &[usize] {
        &self.shape[..self.ndim]
    }

    /// The element type.
    pub fn element(&self) -> Element {
        self.data.element()
    }

    /// The elements.
    pub fn data(&self) -> &Elements {
        &self.data
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the array holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `uint8` elements, if that is the type.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.data {
            Elements::U8(v) => Some(v),
            _ => None,
        }
    }

    /// The `int64` elements, if that is the type.
    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.data {
            Elements::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The `float32` elements, if that is the type.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Elements::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.as_bytes()
    }

    /// Elements per sample (the product of the shape past its first axis).
    fn per_sample(&self) -> usize {
        self.shape[1..self.ndim].iter().product()
    }

    /// Drops the samples from `keep` on (a batch shortened by skipped samples).
    pub(crate) fn truncate(&mut self, keep: usize) {
        let n = keep * self.per_sample();
        match &mut self.data {
            Elements::U8(v) => v.truncate(n),
            Elements::I64(v) => v.truncate(n),
            Elements::F32(v) => v.truncate(n),
            Elements::F16(v) => v.truncate(n),
        }
        self.shape[0] = keep;
    }

    /// Moves sample `from` over sample `to` (`to < from`), compacting a batch.
    pub(crate) fn move_sample(&mut self, from: usize, to: usize) {
        let per = self.per_sample();
        let (src, dst) = (from * per..(from + 1) * per, to * per);
        match &mut self.data {
            Elements::U8(v) => v.copy_within(src, dst),
            Elements::I64(v) => v.copy_within(src, dst),
            Elements::F32(v) => v.copy_within(src, dst),
            Elements::F16(v) => v.copy_within(src, dst),
        }
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let data = std::mem::replace(&mut self.data, Elements::U8(Vec::new()));
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

/// The boxes of a batch, padded to `max_boxes` per sample.
#[derive(Debug)]
pub struct Boxes {
    /// `(batch, max_boxes, 4)` `float32`: `x1, y1, x2, y2` in the output's
    /// pixels; zeros past each sample's count.
    pub coords: Array,
    /// `(batch, max_boxes)` `int64`: each box's class; `-1` past the count.
    pub labels: Array,
    /// `(batch,)` `int64`: the boxes each sample kept.
    pub counts: Array,
}

/// One batch.
#[derive(Debug)]
pub struct Batch {
    /// The images.
    pub images: Array,
    /// Each sample's label: `(batch,)` `int64` (`-1` for a sample without a
    /// `.cls`), or `(batch, classes)` `float32` from a `.npy` member, or
    /// with [`crate::LoaderOptions::mix`] the soft labels `(batch,
    /// num_classes)` `float32`; `None` when [`crate::LabelSource::None`]
    /// was asked for.
    pub labels: Option<Array>,
    /// Each sample's global index.
    pub indices: Vec<u64>,
    /// The masks asked for ([`crate::LoaderOptions::masks`]), each
    /// `(batch, height, width)` as the images.
    pub masks: Vec<(String, Array)>,
    /// The boxes, when asked for ([`crate::LoaderOptions::boxes`]).
    pub boxes: Option<Boxes>,
    /// The members asked for with [`crate::LoaderOptions::fields`], per
    /// field, one entry per sample (`None` where a sample lacks it).
    pub fields: Vec<(String, Vec<Option<Vec<u8>>>)>,
    /// Samples left out of this batch (`OnError::Skip`).
    pub skipped: Vec<Skipped>,
}

impl Batch {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch holds no sample (every one skipped).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The `.cls` labels, when they are what the labels hold.
    pub fn class_labels(&self) -> Option<&[i64]> {
        self.labels.as_ref()?.as_i64()
    }

    /// Every array of the batch, for what is done to all of them.
    pub(crate) fn arrays_mut(&mut self) -> impl Iterator<Item = &mut Array> {
        let boxes = self
            .boxes
            .iter_mut()
            .flat_map(|b| [&mut b.coords, &mut b.labels, &mut b.counts]);
        std::iter::once(&mut self.images)
            .chain(self.labels.iter_mut())
            .chain(self.masks.iter_mut().map(|(_, m)| m))
            .chain(boxes)
    }
}

/// Buffers kept for reuse: an array's buffer comes back when the [`Array`]
/// is dropped, so a steady loop allocates nothing. Bounded: at most
/// `keep` idle buffers (set by the loader: its arrays in flight).
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Elements>>,
    keep: usize,
}

impl BufferPool {
    /// A pool keeping at most `keep` idle buffers.
    pub fn new(keep: usize) -> Self {
        BufferPool {
            free: Mutex::new(Vec::new()),
            keep,
        }
    }

    /// An array of `shape` (`shape[0]` samples) of `element`, contents
    /// unspecified. Its memory is reserved with `try_reserve`: memory the
    /// machine does not have is an error, not an abort.
    pub fn take(self: &Arc<Self>, element: Element, shape: &[usize]) -> Result<Array> {
        let len = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| LoaderError::OutOfMemory {
                bytes: u64::MAX,
                what: format!("a {} array of shape {shape:?}", element.name()),
            })?;
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            // The smallest idle buffer of the type that holds `len`, else any of the type.
            let fits = |d: &Elements| d.element() == element;
            let at = free
                .iter()
                .enumerate()
                .filter(|(_, d)| fits(d))
                .min_by_key(|(_, d)| (capacity(d) < len, capacity(d)))
                .map(|(i, _)| i);
            at.map(|i| free.swap_remove(i))
        };
        let mut data = reused.unwrap_or(match element {
            Element::U8 => Elements::U8(Vec::new()),
            Element::I64 => Elements::I64(Vec::new()),
            Element::F32 => Elements::F32(Vec::new()),
            Element::F16 => Elements::F16(Vec::new()),
        });
        let oom = |_| LoaderError::OutOfMemory {
            bytes: len as u64 * element.size() as u64,
            what: format!("a {} array of shape {shape:?}", element.name()),
        };
        fn sized<T: Clone>(
            v: &mut Vec<T>,
            len: usize,
            zero: T,
        ) -> std::result::Result<(), std::collections::TryReserveError> {
            v.truncate(len);
            v.try_reserve_exact(len - v.len())?;
            v.resize(len, zero);
            Ok(())
        }
        match &mut data {
            Elements::U8(v) => sized(v, len, 0),
            Elements::I64(v) => sized(v, len, 0),
            Elements::F32(v) => sized(v, len, 0.0),
            Elements::F16(v) => sized(v, len, f16::ZERO),
        }
        .map_err(oom)?;
        let mut dims = [0; 4];
        dims[..shape.len()].copy_from_slice(shape);
        Ok(Array {
            data,
            shape: dims,
            ndim: shape.len(),
            pool: Some(Arc::clone(self)),
        })
    }

    fn put(&self, data: Elements) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < self.keep && capacity(&data) > 0 {
            free.push(data);
        }
    }
}

fn capacity(d: &Elements) -> usize {
    match d {
        Elements::U8(v) => v.capacity(),
        Elements::I64(v) => v.capacity(),
        Elements::F32(v) => v.capacity(),
        Elements::F16(v) => v.capacity(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_compact_and_go_back_to_their_pool() {
        let pool = Arc::new(BufferPool::new(4));
        let mut a = pool.take(Element::I64, &[3, 2]).unwrap();
        if let Elements::I64(v) = &mut a.data {
            v.copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        }
        a.move_sample(2, 1);
        a.truncate(2);
        assert_eq!(a.shape(), [2, 2]);
        assert_eq!(a.as_i64().unwrap(), [1, 2, 5, 6]);
        drop(a);
        // The buffer comes back: the next array of the type reuses it.
        let b = pool.take(Element::I64, &[1, 2]).unwrap();
        assert!(capacity(&b.data) >= 6);
        // Memory no machine has is an error.
        let e = pool.take(Element::F32, &[1 << 40, 1 << 20]).unwrap_err();
        assert!(matches!(e, LoaderError::OutOfMemory { .. }), "{e}");
    }
}
