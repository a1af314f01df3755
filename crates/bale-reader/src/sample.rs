//! A sample as the reader returns it: key, index, label and fields, all
//! slices of one shared buffer.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use memmap2::Mmap;
use smallvec::SmallVec;

/// Bytes a sample's fields point into: a heap buffer (a positioned read or a
/// decompressed frame, possibly shared by the samples of one large read) or
/// a shard's memory map (zero-copy).
#[derive(Clone)]
pub(crate) enum Buf {
    Heap(Arc<HeapBuf>),
    Map(Arc<Mmap>),
    /// A shard's memory map through a handle of its own, shared by the
    /// samples of one job (a run, or a batch of single reads on a reader
    /// thread). Their reference counts then live on a cache line of the
    /// job's, not on the shard's: a reader thread that builds samples
    /// (counting up) and the caller that drops them (counting down) would
    /// otherwise pass the shard's line between their cores once per sample,
    /// which bounded a warm sequential epoch (docs/benchmarks.md).
    JobMap(Arc<JobHandle>),
    /// An answer from object storage (shared by the samples of one request).
    Bytes(bytes::Bytes),
}

/// A job's own handle to a shard's memory map ([`Buf::JobMap`]).
pub(crate) struct JobHandle(Arc<Mmap>);

impl Buf {
    /// A handle of a job's own to `map`, for the samples of one job.
    pub(crate) fn job_map(map: &Arc<Mmap>) -> Self {
        Buf::JobMap(Arc::new(JobHandle(Arc::clone(map))))
    }

    /// The shard's memory map the bytes are a slice of, if any.
    fn map(&self) -> Option<&Mmap> {
        match self {
            Buf::Map(m) => Some(m),
            Buf::JobMap(m) => Some(&m.0),
            Buf::Heap(_) | Buf::Bytes(_) => None,
        }
    }

    /// A heap buffer of its own (not pooled).
    pub fn owned(data: Vec<u8>) -> Self {
        let len = data.len();
        Buf::Heap(Arc::new(HeapBuf {
            data,
            len,
            pool: None,
        }))
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Heap(v) => v,
            Buf::Map(m) => m,
            Buf::JobMap(m) => &m.0,
            Buf::Bytes(b) => b,
        }
    }
}

/// A heap buffer whose first `len` bytes are the data; a pooled one goes
/// back to its pool when the last sample using it is dropped.
pub(crate) struct HeapBuf {
    data: Vec<u8>,
    len: usize,
    pool: Option<Arc<BufPool>>,
}

impl Deref for HeapBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

impl Drop for HeapBuf {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.put(std::mem::take(&mut self.data));
        }
    }
}

/// Read buffers kept for reuse, so positioned reads neither zero fresh
/// memory nor fault in new pages. Bounded: at most [`BufPool::MAX_BYTES`]
/// of idle buffers.
#[derive(Debug, Default)]
pub(crate) struct BufPool {
    free: Mutex<(Vec<Vec<u8>>, usize)>,
}

impl BufPool {
    const MAX_BYTES: usize = 32 << 20;

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<Vec<u8>>, usize)> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fills a buffer of `len` bytes with `fill` (a read that overwrites all
    /// of them), reusing an idle buffer when there is one.
    pub fn filled<E>(
        self: &Arc<Self>,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<Buf, E> {
        let mut data = {
            let mut free = self.lock();
            let v = free.0.pop().unwrap_or_default();
            free.1 -= v.len();
            v
        };
        if data.len() < len {
            data.resize(len, 0);
        }
        let r = fill(&mut data[..len]);
        let buf = HeapBuf {
            data,
            len,
            pool: Some(Arc::clone(self)),
        };
        r.map(|()| Buf::Heap(Arc::new(buf)))
    }

    fn put(&self, data: Vec<u8>) {
        let mut free = self.lock();
        if free.1 + data.len() <= Self::MAX_BYTES {
            free.1 += data.len();
            free.0.push(data);
        }
    }
}

/// One field of a sample: the member `<key>.<ext>`.
#[derive(Debug, Clone)]
pub(crate) struct Field {
    pub ext: SmallStr<14>,
    /// Offset of the data in the sample's bytes.
    pub start: usize,
    pub len: usize,
}

/// A sample's fields: up to four without a heap allocation.
pub(crate) type Fields = SmallVec<[Field; 4]>;

/// A string kept inline when it is at most `N` bytes (`N` < 256): a
/// sample's key and extensions, so that reading a sample allocates nothing
/// in the common case.
#[derive(Clone)]
pub(crate) enum SmallStr<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Heap(Box<str>),
}

impl<const N: usize> SmallStr<N> {
    pub fn new(s: &str) -> Self {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= N => {
                let mut bytes = [0u8; N];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                SmallStr::Inline { len, bytes }
            }
            _ => SmallStr::Heap(s.into()),
        }
    }
}

impl<const N: usize> Deref for SmallStr<N> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            // SAFETY: the bytes were copied whole from a `&str` (`new`).
            SmallStr::Inline { len, bytes } => unsafe {
                std::str::from_utf8_unchecked(&bytes[..usize::from(*len)])
            },
            SmallStr::Heap(s) => s,
        }
    }
}

impl<const N: usize> fmt::Debug for SmallStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// One sample: its key, global index, label (from a `.cls` member) and fields.
///
/// A sample owns (a share of) its bytes: it is `Send + Sync`, outlives the
/// [`Dataset`](crate::Dataset) it came from, and clones cheaply (the bytes
/// are reference-counted, never copied). Every field is a slice of one
/// buffer: the shard's memory map when the dataset is opened with
/// [`Backing::Mmap`](crate::Backing::Mmap) on a plain tar shard (zero-copy),
/// else the one buffer the sample was read (or decompressed) into.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # bale_reader::testing::TestDataset::new(4, 2).write(dir.path())?;
/// let ds = bale_reader::Dataset::open(dir.path())?;
/// let s = ds.get(3)?;
/// assert_eq!(s.index(), 3);
/// assert_eq!(s.label(), Some(3));
/// assert_eq!(ds.label_name(3), Some("class-3"));
/// for (ext, bytes) in s.fields() {
///     println!("{}.{ext}: {} bytes", s.key(), bytes.len());
/// }
/// assert!(s.field("bin").is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Sample {
    pub(crate) key: SmallStr<62>,
    pub(crate) index: u64,
    pub(crate) label: Option<i64>,
    pub(crate) buf: Buf,
    /// Offset of the sample's bytes in `buf` (its first tar header).
    pub(crate) base: usize,
    pub(crate) fields: Fields,
}

impl Sample {
    /// The key: member names are `<key>.<ext>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The sample's global index in the dataset.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The class index held by the `.cls` member (decimal ASCII, surrounding
    /// whitespace ignored), when the sample has one. The class name is
    /// [`Dataset::label_name`](crate::Dataset::label_name).
    pub fn label(&self) -> Option<i64> {
        self.label
    }

    /// The bytes of the field with extension `ext` (without the dot: `"jpg"`).
    pub fn field(&self, ext: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|f| &*f.ext == ext)
            .map(|f| self.slice(f))
    }

    /// The fields as `(extension, bytes)`, in shard order.
    pub fn fields(&self) -> impl ExactSizeIterator<Item = (&str, &[u8])> + '_ {
        self.fields.iter().map(|f| (&*f.ext, self.slice(f)))
    }

    /// The extensions of the fields, in shard order.
    pub fn extensions(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.fields.iter().map(|f| &*f.ext)
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether the sample has no field (never true for a sample read from a shard).
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Total bytes of the fields' data.
    pub fn data_len(&self) -> usize {
        self.fields.iter().map(|f| f.len).sum()
    }

    /// Whether the fields are slices of a shard's memory map (zero-copy).
    pub fn is_mapped(&self) -> bool {
        self.buf.map().is_some()
    }

    fn slice(&self, f: &Field) -> &[u8] {
        let start = self.base + f.start;
        &self.buf[start..start + f.len]
    }

    /// The span of `buf` the sample covers.
    pub(crate) fn span(&self) -> (usize, usize) {
        let end = self
            .fields
            .iter()
            .map(|f| f.start + f.len)
            .max()
            .unwrap_or(0);
        (self.base, self.base + end)
    }

    /// Copies the sample's bytes into a buffer of its own when it shares a
    /// larger heap buffer (the read of a run of samples), so that holding it
    /// does not hold the whole run. Mapped samples are left alone (the map
    /// costs no heap).
    pub(crate) fn compact(&mut self) {
        let (s, e) = self.span();
        match &self.buf {
            Buf::Heap(v) if s != 0 || e != v.len() => {
                self.buf = Buf::owned(v[s..e].to_vec());
                self.base = 0;
            }
            Buf::Bytes(b) if s != 0 || e != b.len() => {
                self.buf = Buf::Bytes(bytes::Bytes::copy_from_slice(&b[s..e]));
                self.base = 0;
            }
            _ => {}
        }
    }

    /// Asks the CPU to start loading every cache line of the first 4 KiB of
    /// each field, without waiting (a hint: never a page fault; pages not
    /// mapped yet are skipped, so populate first). A caller that hands out
    /// samples one by one issues this a couple of samples ahead of the one
    /// it copies, so the loads finish while it works on the samples between;
    /// past the first 4 KiB the CPU's stream prefetchers keep ahead of a copy.
    pub fn prefetch(&self) {
        for f in &self.fields {
            let bytes = self.slice(f);
            bale_format::prefetch(&bytes[..bytes.len().min(4096)]);
        }
    }

    /// Brings a mapped sample's bytes into memory now, by touching one byte
    /// of every page its fields cover (the page faults happen in the
    /// calling thread, e.g. before a language binding takes its lock to copy
    /// them). The tar headers are not touched: a page holding only a header
    /// is not needed. Samples in a heap buffer are already in memory.
    pub fn populate(&self) {
        if let Some(m) = self.buf.map() {
            let mut acc = 0u8;
            for f in &self.fields {
                let at = self.base + f.start;
                let bytes = &m[at..at + f.len];
                // The first byte, then the first byte of every later page
                // (the map starts on a page boundary, so `at % PAGE` is the
                // offset in the first page).
                let mut i = 0;
                while i < bytes.len() {
                    // SAFETY: `i` is in bounds; a volatile read keeps the touch from being optimised out.
                    acc ^= unsafe { std::ptr::read_volatile(bytes.as_ptr().add(i)) };
                    i = (i + PAGE) - (at + i) % PAGE;
                }
            }
            std::hint::black_box(acc);
        }
    }

    /// Asks the kernel to start reading a mapped sample's pages
    /// (`MADV_WILLNEED`): one request per run of fields less than a page
    /// apart (one for a tar sample, one per member of a scattered one).
    pub(crate) fn will_need(&self) {
        if let Some(m) = self.buf.map() {
            let mut run: Option<(usize, usize)> = None;
            for f in &self.fields {
                let (a, b) = (self.base + f.start, self.base + f.start + f.len);
                run = match run {
                    Some((s, e)) if a >= s && a <= e + PAGE => Some((s, e.max(b))),
                    Some((s, e)) => {
                        will_need(m, s as u64, (e - s) as u64);
                        Some((a, b))
                    }
                    None => Some((a, b)),
                };
            }
            if let Some((s, e)) = run {
                will_need(m, s as u64, (e - s) as u64);
            }
        }
    }
}

/// Points the mapped samples of one job at a handle per shard map of the
/// job's own ([`Buf::JobMap`]), so that the thread that drops them does not
/// count on the line the shard's other readers count on.
pub(crate) fn share_maps(samples: &mut [crate::Result<Sample>]) {
    let mut shared: Option<Arc<JobHandle>> = None;
    for s in samples.iter_mut().flatten() {
        let Buf::Map(m) = &s.buf else { continue };
        let handle = match &shared {
            Some(h) if Arc::ptr_eq(&h.0, m) => Arc::clone(h),
            _ => Arc::clone(shared.insert(Arc::new(JobHandle(Arc::clone(m))))),
        };
        s.buf = Buf::JobMap(handle);
    }
}

/// The page size the touches step by (a smaller step than the real page
/// size only touches some pages twice).
const PAGE: usize = 4096;

impl fmt::Debug for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields: Vec<(&str, usize)> = self.fields.iter().map(|x| (&*x.ext, x.len)).collect();
        f.debug_struct("Sample")
            .field("key", &self.key)
            .field("index", &self.index)
            .field("label", &self.label)
            .field("fields", &fields)
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

/// Asks the kernel to start reading `len` bytes of the map at `offset` (one
/// request for the whole range) unless they are cached; pages are then
/// faulted in without further I/O. A failure only loses the hint.
///
/// A range within one 4 KiB block is left alone: faulting its page in does
/// the same one-page read the hint would start (the maps are `MADV_RANDOM`:
/// no read-ahead either way), and the system call would cost more than the
/// read of a small cached sample.
pub(crate) fn will_need(map: &Mmap, offset: u64, len: u64) {
    if len == 0 || offset / 4096 == offset.saturating_add(len - 1) / 4096 {
        return;
    }
    if let (Ok(o), Ok(l)) = (usize::try_from(offset), usize::try_from(len))
        && l > 0
    {
        let _ = map.advise_range(memmap2::Advice::WillNeed, o, l);
    }
}

/// Parses a `.cls` member: a decimal integer in ASCII, surrounding whitespace
/// allowed ([`bale_format::parse_label`], the rule the writers check too).
pub fn parse_label(data: &[u8]) -> Option<i64> {
    bale_format::parse_label(data)
}
