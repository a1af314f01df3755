//! The page cache as the tests see it: which pages of a file are resident,
//! and dropping them.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

pub const PAGE: u64 = 4096;

/// Pages of `path` in `start..start + len` that are in the page cache.
pub fn resident(path: &Path, start: u64, len: u64) -> usize {
    let file = File::open(path).unwrap();
    // SAFETY: a read-only map of a file this test wrote and nobody truncates; it is never read.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let pages = len.div_ceil(PAGE) as usize;
    let mut vec = vec![0u8; pages];
    // SAFETY: the range lies inside the map (page-aligned start), and `vec` has a byte per page.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr().add(start as usize) as *mut libc::c_void,
            len as usize,
            vec.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

/// Drops the file's pages from the page cache, and checks that they are gone.
pub fn evict(path: &Path) {
    let file = File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: a plain syscall on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
    let len = file.metadata().unwrap().len();
    let left = resident(path, 0, len);
    assert_eq!(
        left,
        0,
        "{}: {left} pages still cached after POSIX_FADV_DONTNEED; this test needs a \
         filesystem whose cache can be evicted (not tmpfs)",
        path.display()
    );
}
