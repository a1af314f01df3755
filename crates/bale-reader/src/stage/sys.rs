//! The system calls behind staging: free space, file system type, available
//! memory, mount and unmount.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bale_format::FormatError;
use bale_format::shown;

use crate::error::{ReaderError, Result, StageErrorKind};

/// `TMPFS_MAGIC` from linux/magic.h.
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// `RAMFS_MAGIC` from linux/magic.h.
const RAMFS_MAGIC: i64 = 0x8584_58f6;

fn io_error(path: &Path, source: io::Error) -> ReaderError {
    FormatError::Io {
        path: path.to_path_buf(),
        source,
    }
    .into()
}

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"))
}

/// Bytes available to an unprivileged user on the file system holding `path`.
pub(crate) fn free_bytes(path: &Path) -> Result<u64> {
    let c = cpath(path).map_err(|e| io_error(path, e))?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path, `s` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(io_error(path, io::Error::last_os_error()));
    }
    #[allow(clippy::unnecessary_cast)] // The field types differ between targets.
    Ok((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

/// Whether `path` lies on a RAM-backed file system (tmpfs or ramfs), where
/// files live in memory (or swap) and dropping the page cache evicts nothing.
///
/// # Errors
/// The OS error of `statfs` (a missing path, a path holding a NUL byte).
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// let on_ram = bale_reader::stage::is_ram_backed(std::path::Path::new("/"))?;
/// # let _ = on_ram;
/// # Ok(()) }
/// ```
pub fn is_ram_backed(path: &Path) -> io::Result<bool> {
    let c = cpath(path)?;
    // SAFETY: statfs is plain old data; all-zero is a valid value.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path, `s` a writable statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's type differs between targets.
    let t = s.f_type as i64;
    Ok(t == TMPFS_MAGIC || t == RAMFS_MAGIC)
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub(crate) fn mem_available() -> Result<u64> {
    let path = Path::new("/proc/meminfo");
    let text = std::fs::read_to_string(path).map_err(|e| io_error(path, e))?;
    parse_meminfo(&text).ok_or_else(|| {
        io_error(
            path,
            io::Error::new(io::ErrorKind::InvalidData, "no MemAvailable line"),
        )
    })
}

fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Whether the process runs as root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the folder `dir` reaches (through symlinks) is the root of a
/// mount: as `statx` says (`STATX_ATTR_MOUNT_ROOT`, which sees a bind mount
/// of the same file system too), else when its device differs from its
/// parent's (`dir/..`, the parent of where a symlink leads, not of the link).
pub(crate) fn is_mount_point(dir: &Path) -> bool {
    statx_mount_root(dir).unwrap_or_else(|| device_differs_from_parent(dir))
}

/// Whether `dir` (through symlinks) lies on another device than `dir/..`,
/// or is its own parent (`/`).
fn device_differs_from_parent(dir: &Path) -> bool {
    match (std::fs::metadata(dir), std::fs::metadata(dir.join(".."))) {
        (Ok(a), Ok(b)) => a.dev() != b.dev() || a.ino() == b.ino(),
        _ => false,
    }
}

/// `STATX_ATTR_MOUNT_ROOT` of `path`, when the kernel reports it (Linux 5.8 on).
fn statx_mount_root(path: &Path) -> Option<bool> {
    let c = cpath(path).ok()?;
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // The system call, not glibc's wrapper (glibc 2.28 on): the wheel links
    // against glibc 2.17. A kernel without statx (before 4.11) says ENOSYS,
    // and the caller then compares devices.
    // SAFETY: `c` is a valid NUL-terminated path, `stx` a writable statx,
    // each argument of the type the kernel takes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_statx,
            libc::AT_FDCWD,
            c.as_ptr(),
            0 as libc::c_int,
            libc::STATX_BASIC_STATS,
            &mut stx as *mut libc::statx,
        )
    };
    let flag = libc::STATX_ATTR_MOUNT_ROOT as u64;
    (r == 0 && stx.stx_attributes_mask & flag != 0).then_some(stx.stx_attributes & flag != 0)
}

/// The `size=` option for a tmpfs of at least `bytes`, in MiB.
pub(crate) fn tmpfs_size_option(bytes: u64) -> String {
    format!("size={}m", bytes.div_ceil(1 << 20).max(1))
}

/// The tmpfs option that keeps a staged file in 2 MiB pages where it can
/// fill them (`huge=within_size`: every aligned 2 MiB that lies within the
/// file's size, which bale sets before it copies the bytes in). Warm random
/// reads of a staged shard then miss the TLB far less: 1.14-1.2x faster
/// for 2 KB samples (docs/benchmarks.md, "Staged in 2 MiB pages").
const HUGE_OPTION: &str = "huge=within_size";

/// The kernel's transparent huge page setting for tmpfs (the bracketed
/// word of `shmem_enabled`, e.g. `never`, `within_size`, `deny`, `force`),
/// or None where the kernel has no such pages.
fn shmem_enabled() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled").ok()?;
    let (_, rest) = text.split_once('[')?;
    let (word, _) = rest.split_once(']')?;
    Some(word.to_owned())
}

/// Whether this kernel's tmpfs takes [`HUGE_OPTION`] (it has transparent
/// huge pages, and does not deny them to every tmpfs).
pub(crate) fn tmpfs_has_huge_pages() -> bool {
    shmem_enabled().is_some_and(|w| w != "deny")
}

/// Whether the tmpfs holding `path` keeps its files in 2 MiB pages already:
/// mounted `huge=always` or `huge=within_size`, or every tmpfs forced to
/// them (`shmem_enabled` set to `force`). `huge=advise` does not count: a
/// file there gets them only through `madvise`.
pub(crate) fn tmpfs_gives_huge_pages(path: &Path) -> bool {
    shmem_enabled().is_some_and(|w| w == "force")
        || mount_reached(path)
            .is_some_and(|(_, m)| m.fstype == "tmpfs" && has_huge_option(&m.options))
}

/// `path` through symlinks, and the mount it reaches: the one whose device
/// it is on (not one hidden under another, nor one mounted over a parent
/// folder). None when any of them cannot be read.
fn mount_reached(path: &Path) -> Option<(PathBuf, MountEntry)> {
    let real = std::fs::canonicalize(path).ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dev = device_of(&real)?;
    let m = mount_holding(&mountinfo, &real, Some(dev))?;
    Some((real, m))
}

/// The `major:minor` device numbers of the file system `path` lies on (a
/// tmpfs has its own per mount), as /proc/self/mountinfo writes them.
fn device_of(path: &Path) -> Option<(u32, u32)> {
    let dev = std::fs::metadata(path).ok()?.dev();
    Some((libc::major(dev), libc::minor(dev)))
}

/// The source name of the tmpfs bale mounts, as /proc/self/mountinfo and
/// `mount` list it. It marks the mount as bale's from the moment it exists,
/// before the staging marker is written inside: a run killed in between
/// leaves a tmpfs that a rerun stages into and `bale unstage` unmounts.
pub(crate) const MOUNT_SOURCE: &str = "bale-stage";

/// Whether `dir` (through symlinks) is the root of a tmpfs bale mounted:
/// the mount `dir` reaches (the one whose device it is on: not one hidden
/// under another, nor one mounted over a parent folder) starts at `dir`,
/// shows its file system from its root (not a bind mount of a folder
/// inside), is a tmpfs and has [`MOUNT_SOURCE`] for its source.
pub(crate) fn is_bale_tmpfs(dir: &Path) -> bool {
    mount_reached(dir).is_some_and(|(real, m)| {
        m.point == real && m.root == b"/" && m.fstype == "tmpfs" && m.source == MOUNT_SOURCE
    })
}

/// Whether a tmpfs's options give its files 2 MiB pages without `madvise`.
fn has_huge_option(options: &str) -> bool {
    options
        .split(',')
        .any(|o| o == "huge=always" || o == "huge=within_size")
}

/// One line of /proc/self/mountinfo, the fields bale reads.
#[derive(Debug, PartialEq, Eq)]
struct MountEntry {
    /// The `major:minor` device numbers of its file system.
    dev: (u32, u32),
    /// The folder of its file system it shows (`/` unless a bind mount of
    /// a folder inside), escapes decoded.
    root: Vec<u8>,
    /// Where it is mounted, escapes decoded.
    point: PathBuf,
    /// The file system type, e.g. `tmpfs`.
    fstype: String,
    /// The mount source, escapes decoded (lossily: bale compares it with
    /// its own ASCII name only).
    source: String,
    /// The super-block options, e.g. `rw,size=65536k,huge=within_size`.
    options: String,
}

/// The mount that holds `path` (an absolute path without symlinks), from
/// the text of /proc/self/mountinfo: among the entries on the device `dev`
/// (`path`'s own; any when None), the one whose mount point is the longest
/// prefix of `path`, the last one listed when several are stacked on one
/// point. The device tells the mount `path` reaches from one hidden under
/// another (the order of the list is not the order of stacking).
fn mount_holding(mountinfo: &str, path: &Path, dev: Option<(u32, u32)>) -> Option<MountEntry> {
    let mut best: Option<(usize, MountEntry)> = None;
    for line in mountinfo.lines() {
        let mut fields = line.split(' ');
        let (Some(numbers), Some(root), Some(point)) =
            (fields.nth(2), fields.next(), fields.next())
        else {
            continue;
        };
        let Some(on) = numbers
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        else {
            continue;
        };
        if dev.is_some_and(|d| d != on) {
            continue;
        }
        let point = PathBuf::from(std::ffi::OsString::from_vec(unescape(point)));
        // After the optional fields: `-`, the type, the source, the options.
        let mut rest = fields.skip_while(|f| *f != "-").skip(1);
        let (Some(fstype), Some(source), Some(options)) = (rest.next(), rest.next(), rest.next())
        else {
            continue;
        };
        if !path.starts_with(&point) {
            continue;
        }
        let depth = point.components().count();
        if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
            let entry = MountEntry {
                dev: on,
                root: unescape(root),
                point,
                fstype: fstype.to_owned(),
                source: String::from_utf8_lossy(&unescape(source)).into_owned(),
                options: options.to_owned(),
            };
            best = Some((depth, entry));
        }
    }
    best.map(|(_, m)| m)
}

/// A mountinfo path with its `\NNN` octal escapes (space, tab, newline,
/// backslash) turned back into bytes.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(d) = b.get(i + 1..i + 4)
            && d.iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push(((d[0] - b'0') << 6) | ((d[1] - b'0') << 3) | (d[2] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The mount options bale gives a tmpfs of at least `bytes`.
fn tmpfs_options(bytes: u64, huge: bool) -> String {
    let size = tmpfs_size_option(bytes);
    if huge {
        format!("{size},mode=0755,{HUGE_OPTION}")
    } else {
        format!("{size},mode=0755")
    }
}

/// The mount command a user can run.
pub(crate) fn mount_command(dir: &Path, bytes: u64) -> String {
    let dir = shell_quote(&dir.display().to_string());
    format!(
        "sudo mkdir -p {dir} && sudo mount -t tmpfs -o {} tmpfs {dir}",
        tmpfs_options(bytes, tmpfs_has_huge_pages()),
    )
}

/// Quotes `s` for a POSIX shell when it needs it.
fn shell_quote(s: &str) -> String {
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
pub(crate) fn mount_tmpfs(dir: &Path, bytes: u64) -> Result<()> {
    let failed = |e: io::Error| {
        let command = mount_command(dir, bytes);
        ReaderError::Stage {
            path: dir.to_path_buf(),
            what: format!("cannot mount a tmpfs at {}: {e}", shown(dir)),
            kind: StageErrorKind::MountFailed { command },
        }
    };
    let target = cpath(dir).map_err(failed)?;
    let source = CString::new(MOUNT_SOURCE).map_err(|e| failed(io::Error::other(e)))?;
    let fstype = c"tmpfs";
    let mount = |huge: bool| -> io::Result<()> {
        let data = CString::new(tmpfs_options(bytes, huge))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: all pointers are valid NUL-terminated strings for the call's duration.
        let r = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    match mount(tmpfs_has_huge_pages()) {
        // A kernel whose tmpfs refuses `huge=`: mount without it.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => mount(false).map_err(failed),
        r => r.map_err(failed),
    }
}

/// Unmounts `dir`.
pub(crate) fn unmount(dir: &Path) -> Result<()> {
    let failed = |e: io::Error| ReaderError::Stage {
        path: dir.to_path_buf(),
        what: format!(
            "cannot unmount {}: {e} (is a process still using it?)",
            shown(dir)
        ),
        kind: StageErrorKind::Unmount,
    };
    let target = cpath(dir).map_err(failed)?;
    // SAFETY: `target` is a valid NUL-terminated path.
    if unsafe { libc::umount2(target.as_ptr(), 0) } != 0 {
        return Err(failed(io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_quoting_and_mount_options() {
        let text = "MemTotal:       24684096 kB\nMemFree:  1 kB\nMemAvailable:   24037492 kB\n";
        assert_eq!(parse_meminfo(text), Some(24_037_492 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(
            parse_meminfo("MemAvailable: 99999999999999999999 kB\n"),
            None
        );
        assert_eq!(shell_quote("/dev/shm/bale/x-1"), "/dev/shm/bale/x-1");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(tmpfs_size_option(1), "size=1m");
        assert_eq!(tmpfs_size_option(3 << 20), "size=3m");
        assert_eq!(tmpfs_size_option((3 << 20) + 1), "size=4m");
        assert_eq!(
            mount_command(Path::new("/mnt/a b"), 1),
            format!(
                "sudo mkdir -p '/mnt/a b' && sudo mount -t tmpfs -o {} tmpfs '/mnt/a b'",
                tmpfs_options(1, tmpfs_has_huge_pages())
            )
        );
        assert_eq!(tmpfs_options(1, false), "size=1m,mode=0755");
        assert_eq!(
            tmpfs_options(3 << 20, true),
            "size=3m,mode=0755,huge=within_size"
        );
    }

    #[test]
    fn the_mount_holding_a_path_and_its_huge_option() {
        let info = "\
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334460k,mode=755
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684084k
30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=100k,huge=within_size
31 30 0:28 / /dev/shm/a\\040b rw shared:5 master:1 - tmpfs tmpfs rw,huge=always
32 30 0:29 / /dev/shm/ad rw - tmpfs tmpfs rw,huge=advise
33 1 0:30 / / rw - ext4 /dev/vda1 rw
34 33 0:31 / /mnt/t\\134nx rw - tmpfs bale-stage rw,size=65536k,huge=within_size
35 33 0:32 / /srv rw - tmpfs my\\040src rw
36 33 0:31 /sub\\040dir /mnt/bind rw - tmpfs bale-stage rw
";
        let at = |p: &str| mount_holding(info, Path::new(p), None);
        let opts = |p: &str| at(p).map(|m| m.options);
        // The last of the mounts stacked on /dev/shm.
        assert_eq!(opts("/dev/shm/x").unwrap(), "rw,size=100k,huge=within_size");
        // An escaped space, and optional fields before the `-`.
        assert_eq!(opts("/dev/shm/a b/c").unwrap(), "rw,huge=always");
        // A prefix of a name is not a parent folder.
        assert_eq!(
            opts("/dev/shm/a bc").unwrap(),
            "rw,size=100k,huge=within_size"
        );
        assert_eq!(opts("/dev/shm/ad").unwrap(), "rw,huge=advise");
        assert_eq!(
            at("/home/x").unwrap(),
            MountEntry {
                dev: (0, 30),
                root: b"/".to_vec(),
                point: "/".into(),
                fstype: "ext4".into(),
                source: "/dev/vda1".into(),
                options: "rw".into()
            }
        );
        // The source, escapes decoded: what tells bale's tmpfs from others.
        let bale = at("/mnt/t\\nx").unwrap();
        assert_eq!(bale.point, Path::new("/mnt/t\\nx"));
        assert_eq!(bale.source, MOUNT_SOURCE);
        assert_eq!(at("/dev/shm/a b").unwrap().source, "tmpfs");
        assert_eq!(at("/srv/a b").unwrap().source, "my src");
        assert_eq!(
            mount_holding("garbage\n1 2 3\n", Path::new("/x"), None),
            None
        );
        // The device tells the mount a path reaches: the one listed first
        // when it was moved onto the point later, or a parent's mount over
        // a hidden one (/dev/shm's 0:23 over bale's tmpfs listed below it).
        assert_eq!(
            mount_holding(info, Path::new("/dev/shm/x"), Some((0, 23)))
                .unwrap()
                .options,
            "rw,size=24684084k"
        );
        assert_eq!(
            mount_holding(info, Path::new("/dev/shm/ad"), Some((0, 23)))
                .unwrap()
                .point,
            Path::new("/dev/shm")
        );
        assert_eq!(mount_holding(info, Path::new("/x"), Some((9, 9))), None);
        // A bind mount of a folder inside a tmpfs shows that folder as its root.
        let bind = at("/mnt/bind/a").unwrap();
        assert_eq!(
            (bind.root.as_slice(), bind.source.as_str()),
            (&b"/sub dir"[..], MOUNT_SOURCE)
        );
        assert!(has_huge_option("rw,huge=within_size"));
        assert!(has_huge_option("huge=always,rw"));
        assert!(!has_huge_option("rw,huge=advise"));
        assert!(!has_huge_option("rw,huge=never"));
        assert!(!has_huge_option("rw,size=1m"));
        assert_eq!(unescape("a\\040b\\134c\\9"), b"a b\\c\\9");
        assert_eq!(unescape("\\"), b"\\");
    }

    #[test]
    fn mount_points_through_symlinks_and_the_root() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        // Links from this file system to procfs: where a link leads counts.
        let to_root = d.path().join("to-root");
        std::os::unix::fs::symlink("/proc", &to_root).unwrap();
        let inside = d.path().join("inside");
        std::os::unix::fs::symlink("/proc/self", &inside).unwrap();
        for (check, name) in [
            (is_mount_point as fn(&Path) -> bool, "is_mount_point"),
            (device_differs_from_parent, "the fallback"),
        ] {
            assert!(check(Path::new("/")), "{name}: /");
            assert!(check(Path::new("/proc")), "{name}: /proc");
            assert!(!check(Path::new("/proc/self/fd")), "{name}: /proc/self/fd");
            assert!(!check(&sub), "{name}: a plain folder");
            assert!(check(&to_root), "{name}: a link to /proc");
            assert!(!check(&inside), "{name}: a link into /proc");
            assert!(!check(&d.path().join("missing")), "{name}: a missing path");
        }
    }

    #[test]
    fn statx_through_the_system_call_reports_mount_roots() {
        // This kernel (5.8 or later) reports STATX_ATTR_MOUNT_ROOT: the call
        // must reach it, not fall back.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().unwrap().parse().unwrap();
        let minor: u32 = parts.next().unwrap().parse().unwrap();
        if (major, minor) < (5, 8) {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        assert_eq!(statx_mount_root(Path::new("/")), Some(true));
        assert_eq!(statx_mount_root(Path::new("/proc")), Some(true));
        assert_eq!(statx_mount_root(d.path()), Some(false));
        assert_eq!(statx_mount_root(&d.path().join("missing")), None);
    }

    #[test]
    fn space_memory_and_file_system_type_are_readable() {
        assert!(free_bytes(Path::new("/")).unwrap() > 0);
        assert!(mem_available().unwrap() > 0);
        assert!(is_ram_backed(Path::new("/proc/self/nonexistent")).is_err());
        if Path::new("/dev/shm").is_dir() {
            assert!(is_ram_backed(Path::new("/dev/shm")).unwrap());
        }
    }
}
