//! The system calls behind `bale stage`: free space, file system type,
//! available memory, directory locks, mount and unmount.

use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use anyhow::{Context, bail};

/// `TMPFS_MAGIC` from linux/magic.h.
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// `RAMFS_MAGIC` from linux/magic.h.
const RAMFS_MAGIC: i64 = 0x8584_58f6;

fn cpath(path: &Path) -> anyhow::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{} holds a NUL byte", path.display()))
}

/// Bytes available to an unprivileged user on the file system holding `path`.
pub fn free_bytes(path: &Path) -> anyhow::Result<u64> {
    let c = cpath(path)?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path, `s` a writable statvfs.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", path.display()));
    }
    Ok(s.f_bavail as u64 * s.f_frsize as u64)
}

/// Whether `path` lies on a RAM-backed file system (tmpfs or ramfs).
pub fn is_ram_backed(path: &Path) -> anyhow::Result<bool> {
    let c = cpath(path)?;
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path, `s` a writable statfs.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut s) };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statfs {}", path.display()));
    }
    #[allow(clippy::unnecessary_cast)] // f_type's type differs between targets.
    let t = s.f_type as i64;
    Ok(t == TMPFS_MAGIC || t == RAMFS_MAGIC)
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("cannot read /proc/meminfo")?;
    parse_meminfo(&text).context("/proc/meminfo has no MemAvailable line")
}

fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// An exclusive `flock` on a directory, released on drop.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Locks `dir` exclusively, waiting (with a message) if another bale holds it.
pub fn lock_dir(dir: &Path, quiet: bool) -> anyhow::Result<DirLock> {
    let file = File::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is an open descriptor owned by `file`.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e).with_context(|| format!("cannot lock {}", dir.display()));
        }
        if !quiet {
            eprintln!(
                "waiting for another bale stage or unstage of {}",
                dir.display()
            );
        }
        // SAFETY: as above.
        if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot lock {}", dir.display()));
        }
    }
    Ok(DirLock { _file: file })
}

/// The `size=` option for a tmpfs of at least `bytes`, in MiB.
pub fn tmpfs_size_option(bytes: u64) -> String {
    format!("size={}m", bytes.div_ceil(1 << 20).max(1))
}

/// The mount command a user can run.
pub fn mount_command(dir: &Path, bytes: u64) -> String {
    format!(
        "sudo mount -t tmpfs -o {},mode=0755 tmpfs {}",
        tmpfs_size_option(bytes),
        shell_quote(&dir.display().to_string())
    )
}

/// Quotes `s` for a POSIX shell when it needs it.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Mounts a tmpfs of `bytes` at `dir`.
pub fn mount_tmpfs(dir: &Path, bytes: u64) -> anyhow::Result<()> {
    let target = cpath(dir)?;
    let source = CString::new("tmpfs")?;
    let data = CString::new(format!("{},mode=0755", tmpfs_size_option(bytes)))?;
    // SAFETY: all pointers are valid NUL-terminated strings for the call's duration.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            source.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "cannot mount a tmpfs at {}: {e}\nhint: run `{}` yourself, then bale stage without --mount",
            dir.display(),
            mount_command(dir, bytes)
        );
    }
    Ok(())
}

/// Unmounts `dir`.
pub fn unmount(dir: &Path) -> anyhow::Result<()> {
    let target = cpath(dir)?;
    // SAFETY: `target` is a valid NUL-terminated path.
    if unsafe { libc::umount2(target.as_ptr(), 0) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "cannot unmount {}: {e} (is a process still using it?)",
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_and_quoting() {
        let text = "MemTotal:       24684096 kB\nMemFree:  1 kB\nMemAvailable:   24037492 kB\n";
        assert_eq!(parse_meminfo(text), Some(24_037_492 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(shell_quote("/dev/shm/bale/x-1"), "/dev/shm/bale/x-1");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(tmpfs_size_option(1), "size=1m");
        assert_eq!(tmpfs_size_option(3 << 20), "size=3m");
        assert_eq!(tmpfs_size_option((3 << 20) + 1), "size=4m");
    }

    #[test]
    fn space_and_memory_are_readable() {
        assert!(free_bytes(Path::new("/")).unwrap() > 0);
        assert!(mem_available().unwrap() > 0);
    }
}
