//! `bale stage` / `bale unstage` (issue 6), with temporary directories as
//! targets: the copy, reuse, resume, each refusal, and unstage's refusals.
//!
//! Targets live under the repository's `target/` directory (a disk, not a
//! tmpfs) so that the "not a tmpfs" paths are exercised.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use bale_format::Compression;
use serde_json::Value;

use crate::verify::{bale, make_dataset, text};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn scratch() -> tempfile::TempDir {
    let base = bale_tests::repo_root().join("target").join("e2e-stage");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::tempdir_in(base).unwrap()
}

/// (exit code, stdout, stderr) of `bale stage DS --to TARGET EXTRA...`.
fn stage(ds: &Path, target: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["stage", s(ds), "--to", s(target)];
    args.extend_from_slice(extra);
    let out = bale(&args);
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn mtimes(dir: &Path) -> Vec<(String, SystemTime)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().modified().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn same_files(a: &Path, b: &Path, names: &[String]) {
    for n in names {
        assert_eq!(
            std::fs::read(a.join(n)).unwrap(),
            std::fs::read(b.join(n)).unwrap(),
            "{n}"
        );
    }
}

fn dataset_files(ds: &Path) -> Vec<String> {
    let m = bale_format::Manifest::read(ds).unwrap();
    let mut v = vec!["bale.json".to_string()];
    for e in m.shards {
        v.push(e.file);
        v.push(e.index);
    }
    v
}

#[test]
fn stage_copies_checks_and_prints_only_the_path() {
    for c in [Compression::None, Compression::Zstd] {
        let tmp = scratch();
        let ds = tmp.path().join("ds");
        make_dataset(&ds, c, false);
        let target = tmp.path().join("staged");
        let (code, out, err) = stage(&ds, &target, &[]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out, format!("{}\n", target.display()));
        assert!(
            err.contains("staged ") && err.contains("6 files copied"),
            "{err}"
        );
        same_files(&ds, &target, &dataset_files(&ds));
        let marker: Value =
            serde_json::from_slice(&std::fs::read(target.join(".bale-stage.json")).unwrap())
                .unwrap();
        assert_eq!(marker["source"], s(&std::fs::canonicalize(&ds).unwrap()));
        assert_eq!(marker["mounted"], false);
        assert_eq!(marker["files"].as_array().unwrap().len(), 6);
        // The staged copy is a clean dataset (the marker is not a shard).
        let v = bale(&["verify", s(&target)]);
        assert!(v.status.success(), "{}", text(&v.stdout));
        assert_eq!(text(&v.stdout), "");
    }
}

#[test]
fn a_complete_copy_is_reused_without_copying() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    assert_eq!(stage(&ds, &target, &[]).0, 0);
    let before = mtimes(&target);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (code, out, err) = stage(&ds, &target, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}\n", target.display()));
    assert!(err.contains("reusing the complete staged copy"), "{err}");
    assert_eq!(mtimes(&target), before);
}

#[test]
fn a_half_finished_copy_is_resumed_never_used() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    let m = make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    assert_eq!(stage(&ds, &target, &[]).0, 0);
    // Interrupted: no manifest, one shard missing, one damaged (same size), a temp file left.
    std::fs::remove_file(target.join("bale.json")).unwrap();
    std::fs::remove_file(target.join(&m.shards[0].file)).unwrap();
    let damaged = target.join(&m.shards[1].file);
    let mut b = std::fs::read(&damaged).unwrap();
    b[600] ^= 1;
    std::fs::write(&damaged, b).unwrap();
    std::fs::write(target.join(".bale-tmp-1-shard-000000.tar"), b"partial").unwrap();
    let kept = target.join(&m.shards[2].file);
    let kept_mtime = std::fs::metadata(&kept).unwrap().modified().unwrap();
    // Not a dataset while half-finished.
    assert_eq!(bale(&["verify", s(&target)]).status.code(), Some(2));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (code, out, err) = stage(&ds, &target, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}\n", target.display()));
    assert!(
        err.contains("resuming the half-finished staged copy"),
        "{err}"
    );
    assert!(err.contains("2 files copied"), "{err}");
    assert!(err.contains("4 already in place"), "{err}");
    assert_eq!(
        std::fs::metadata(&kept).unwrap().modified().unwrap(),
        kept_mtime
    );
    same_files(&ds, &target, &dataset_files(&ds));
    assert!(!target.join(".bale-tmp-1-shard-000000.tar").exists());
}

#[test]
fn another_version_of_the_dataset_is_redone() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    assert_eq!(stage(&ds, &target, &[]).0, 0);
    // Repack with compression: other files, another manifest.
    std::fs::remove_dir_all(&ds).unwrap();
    make_dataset(&ds, Compression::Zstd, false);
    let (code, _, err) = stage(&ds, &target, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("redoing the staged copy"), "{err}");
    same_files(&ds, &target, &dataset_files(&ds));
    assert!(
        !target.join("shard-000000.tar").exists(),
        "old shards are removed"
    );
}

#[test]
fn refuses_when_the_target_has_too_little_space() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    let m = make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    let (code, out, err) = stage(&ds, &target, &["--assume-free", "1000000"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(&format!("not enough space on {}", target.display())),
        "{err}"
    );
    assert!(
        err.contains("with a 5% + 64 MiB margin), the file system has 976.56 KiB free"),
        "{err}"
    );
    assert!(
        err.contains("hint: free space there, or choose another target with --to DIR"),
        "{err}"
    );
    assert!(!target.exists(), "a refusal leaves nothing behind");
    // Nor the parents it made for the target; a parent that was there stays.
    let deep = tmp.path().join("a").join("b").join("c");
    let (code, _, err) = stage(&ds, &deep, &["--assume-free", "1000000"]);
    assert_eq!(code, 2, "{err}");
    assert!(!tmp.path().join("a").exists(), "{err}");
    std::fs::create_dir(tmp.path().join("a")).unwrap();
    let (code, _, err) = stage(&ds, &deep, &["--assume-free", "1000000"]);
    assert_eq!(code, 2, "{err}");
    assert!(tmp.path().join("a").is_dir() && !tmp.path().join("a").join("b").exists());
    // Through `..`: the folder the path climbs back into was there, and stays.
    std::fs::create_dir(tmp.path().join("old")).unwrap();
    let climbing = tmp.path().join("new1").join("..").join("old").join("new2");
    let (code, _, err) = stage(&ds, &climbing, &["--assume-free", "1000000"]);
    assert_eq!(code, 2, "{err}");
    assert!(tmp.path().join("old").is_dir(), "{err}");
    assert!(!tmp.path().join("new1").exists() && !tmp.path().join("old").join("new2").exists());
    // Enough room for the data but not the margin: refused too.
    let (code, _, err) = stage(&ds, &target, &["--assume-free", &(m.bytes * 2).to_string()]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn refuses_when_memory_is_short() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    let (code, _, err) = stage(&ds, &target, &["--assume-mem", "50000000"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not enough memory to stage"), "{err}");
    assert!(
        err.contains("the machine has 47.68 MiB available (MemAvailable)"),
        "{err}"
    );
    assert!(!target.exists());
    // With plenty, the same run goes through.
    let (code, _, err) = stage(&ds, &target, &["--assume-mem", "1000000000"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn refuses_a_folder_that_is_not_a_staging_folder() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("mine");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("precious.txt"), b"keep me").unwrap();
    let (code, _, err) = stage(&ds, &target, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("is not empty and is not a bale staging folder"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 1);
    // unstage refuses it too.
    let out = bale(&["unstage", s(&target)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is not a bale staging folder"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read(target.join("precious.txt")).unwrap(),
        b"keep me"
    );
    // Staging into the dataset itself is refused.
    let (code, _, err) = stage(&ds, &ds.join("inside"), &[]);
    assert_eq!(code, 2);
    assert!(err.contains("one contains the other"), "{err}");
}

#[test]
fn unstage_removes_only_a_staged_copy() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    assert_eq!(stage(&ds, &target, &[]).0, 0);
    std::fs::write(target.join("notes.txt"), b"not bale's").unwrap();
    let out = bale(&["unstage", s(&target)]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("holds files bale did not write") && err.contains("notes.txt"),
        "{err}"
    );
    assert!(target.join("bale.json").exists());
    std::fs::remove_file(target.join("notes.txt")).unwrap();
    let out = bale(&["unstage", s(&target)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).starts_with(&format!("removed {}", target.display())));
    assert!(!target.exists());
    assert!(ds.join("bale.json").exists(), "the source is untouched");
}

#[test]
fn mount_without_root_prints_the_command() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("ram");
    let (code, _, err) = stage(&ds, &target, &["--mount", "--assume-not-root"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not a tmpfs, and mounting one needs root"),
        "{err}"
    );
    // 2 MiB pages where the kernel has them.
    assert_mount_hint(&err, &target, has_huge_pages());
    assert!(!target.exists());
}

/// `err` ends with the hint to make and mount the test dataset's tmpfs at
/// `target` (65 MiB), `huge=within_size` when `huge`.
fn assert_mount_hint(err: &str, target: &Path, huge: bool) {
    let huge = if huge { ",huge=within_size" } else { "" };
    assert!(
        err.contains(&format!(
            "hint: run `sudo mkdir -p {t} && sudo mount -t tmpfs -o size=65m,mode=0755{huge} tmpfs {t}`",
            t = target.display()
        )),
        "{err}"
    );
}

/// Whether this kernel has transparent huge pages for tmpfs (then `--mount`
/// mounts its tmpfs `huge=within_size`).
fn has_huge_pages() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .is_ok_and(|t| !t.contains("[deny]"))
}

/// Whether this kernel puts every tmpfs in 2 MiB pages, whatever its options.
fn huge_pages_forced() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .is_ok_and(|t| t.contains("[force]"))
}

/// Unmounts a directory on drop, in case a test fails half-way.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
}

/// The lines of /proc/mounts for mounts at `dir`, the topmost last.
fn mounts_at(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(s(dir)))
        .map(str::to_owned)
        .collect()
}

fn is_mounted(dir: &Path) -> bool {
    !mounts_at(dir).is_empty()
}

/// Whether this process may mount a tmpfs (root with the capability).
fn can_mount(probe: &Path) -> bool {
    std::fs::create_dir_all(probe).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs", s(probe)])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|st| st.success());
    if ok {
        let _ = Command::new("umount").arg(probe).status();
    }
    ok
}

/// `bale unstage DIR` of a tmpfs bale mounted: unmounted, and the folder gone.
fn unstage_unmounts(target: &Path) {
    let out = bale(&["unstage", s(target)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("unmounted and removed"),
        "{}",
        text(&out.stderr)
    );
    assert!(!is_mounted(target));
    assert!(!target.exists());
}

#[test]
fn mount_as_root_mounts_a_tmpfs_and_unstage_unmounts_it() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("ram");
    let _guard = Unmount(target.clone());
    let (code, out, err) = stage(&ds, &target, &["--mount"]);
    if !can_mount(&tmp.path().join("probe")) {
        // Not root, or no right to mount here: a clear refusal.
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("mount"), "{err}");
        return;
    }
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}\n", target.display()));
    assert!(err.contains("mounted a tmpfs of 65m"), "{err}");
    let line = mounts_at(&target).pop().unwrap();
    assert!(line.starts_with("bale-stage "), "{line}");
    let marker: Value =
        serde_json::from_slice(&std::fs::read(target.join(".bale-stage.json")).unwrap()).unwrap();
    assert_eq!(marker["mounted"], true);
    same_files(&ds, &target, &dataset_files(&ds));
    // Reuse works on the mount too.
    let (code, _, err) = stage(&ds, &target, &["--mount"]);
    assert_eq!(code, 0);
    assert!(err.contains("reusing"), "{err}");
    unstage_unmounts(&target);
}

/// Where the kernel has transparent huge pages, the tmpfs `--mount` mounts
/// keeps a staged shard in 2 MiB pages: a map of it is mapped by 2 MiB
/// entries (`ShmemPmdMapped` in /proc/self/smaps), which needs both the
/// mount's `huge=within_size` and the copy's size set before its bytes.
#[test]
fn mount_keeps_a_staged_shard_in_2_mib_pages() {
    let tmp = scratch();
    let class = tmp.path().join("tree").join("a");
    std::fs::create_dir_all(&class).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for f in 0..3 {
        let bytes: Vec<u8> = (0..3 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(class.join(format!("f{f}.bin")), bytes).unwrap();
    }
    let ds = tmp.path().join("ds");
    let out = bale(&["pack", s(&tmp.path().join("tree")), "-o", s(&ds), "-q"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let target = tmp.path().join("ram");
    let _guard = Unmount(target.clone());
    let (code, _, err) = stage(&ds, &target, &["--mount", "-q"]);
    if !can_mount(&tmp.path().join("probe")) {
        assert_eq!(code, 2, "{err}");
        return;
    }
    assert_eq!(code, 0, "{err}");
    if !has_huge_pages() {
        // No huge pages in this kernel: the mount went ahead without them.
        return;
    }
    let line = mounts_at(&target).pop().unwrap();
    assert!(line.contains("huge=within_size"), "{line}");
    let shard = target.join("shard-000000.tar");
    let len = std::fs::metadata(&shard).unwrap().len() as usize;
    assert!(len > 8 << 20, "the shard is {len} bytes");
    let f = std::fs::File::open(&shard).unwrap();
    // SAFETY: a read-only shared map of a file no one writes while it is mapped.
    let map = unsafe {
        use std::os::fd::AsRawFd;
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    let mut acc = 0u8;
    for page in (0..len).step_by(4096) {
        // SAFETY: within the map; volatile keeps the read.
        acc ^= unsafe { std::ptr::read_volatile(map.cast::<u8>().add(page)) };
    }
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    // SAFETY: the map made above, unmapped once.
    unsafe { libc::munmap(map, len) };
    drop(f);
    let after = &smaps[smaps.find(s(&shard)).expect("the map is in smaps")..];
    let pmd_kb: u64 = after
        .lines()
        .find_map(|l| l.strip_prefix("ShmemPmdMapped:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(
        pmd_kb >= 2048,
        "the staged shard is not in 2 MiB pages (ShmemPmdMapped {pmd_kb} kB; {acc})"
    );
    let out = bale(&["unstage", s(&target)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Mounts a tmpfs of 256 MiB with `options` at `dir` for a test; None when
/// this process may not mount.
fn test_tmpfs(dir: &Path, options: &str) -> Option<Unmount> {
    test_tmpfs_from("tmpfs", dir, options)
}

/// [`test_tmpfs`] with `source` for the mount's source name.
fn test_tmpfs_from(source: &str, dir: &Path, options: &str) -> Option<Unmount> {
    std::fs::create_dir_all(dir).unwrap();
    let ok = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size=256m,{options}"),
            source,
            s(dir),
        ])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|st| st.success());
    ok.then(|| Unmount(dir.to_path_buf()))
}

fn marker_says_mounted(dir: &Path) -> bool {
    let marker: Value =
        serde_json::from_slice(&std::fs::read(dir.join(".bale-stage.json")).unwrap()).unwrap();
    marker["mounted"].as_bool().unwrap()
}

/// `--mount` is for 2 MiB pages, so a target on a tmpfs without them (as
/// /dev/shm, where `bale stage` stages by default, usually is) gets a tmpfs
/// of bale's own too, unmounted again by unstage; a copy already there in
/// small pages is reused with a note, or refused when half-finished.
#[test]
fn mount_on_a_tmpfs_without_2_mib_pages_mounts_one_of_bale_s_own() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let Some(_ram) = test_tmpfs(&tmp.path().join("ram"), "huge=never") else {
        let (code, _, err) = stage(&ds, &tmp.path().join("t"), &["--mount"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("needs root"), "{err}");
        return;
    };
    let target = tmp.path().join("ram").join("t");
    if !has_huge_pages() || huge_pages_forced() {
        let (code, _, err) = stage(&ds, &target, &["--mount"]);
        assert_eq!(code, 0, "{err}");
        let why = if huge_pages_forced() {
            "keeps files in 2 MiB pages already: not mounting"
        } else {
            "no 2 MiB pages for tmpfs: not mounting"
        };
        assert!(err.contains(why), "{err}");
        return;
    }
    let (code, _, err) = stage(&ds, &target, &["--mount", "--assume-not-root"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "is on a tmpfs without 2 MiB pages, and mounting one of bale's own needs root"
        ),
        "{err}"
    );
    assert_mount_hint(&err, &target, true);
    assert!(!target.exists());
    // Never over another mount: it would hide what is there.
    let (code, _, err) = stage(&ds, &tmp.path().join("ram"), &["--mount"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "is a mount point already; bale mounts its tmpfs only on a folder that is not one"
        ),
        "{err}"
    );
    assert_eq!(
        mounts_at(&tmp.path().join("ram")).len(),
        1,
        "nothing was mounted over the tmpfs"
    );
    // Staged onto a mount point of someone else's (as after the printed
    // commands), unstage empties it and leaves it mounted.
    let ram = tmp.path().join("ram");
    let (code, _, err) = stage(&ds, &ram, &[]);
    assert_eq!(code, 0, "{err}");
    let out = bale(&["unstage", s(&ram)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("is a mount point bale did not make: left in place, still mounted"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(mounts_at(&ram).len(), 1);
    assert_eq!(std::fs::read_dir(&ram).unwrap().count(), 0);

    let _guard = Unmount(target.clone());
    let (code, out, err) = stage(&ds, &target, &["--mount"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}\n", target.display()));
    assert!(err.contains("mounted a tmpfs of 65m"), "{err}");
    assert!(is_mounted(&target));
    let line = mounts_at(&target).pop().unwrap();
    assert!(line.contains("huge=within_size"), "{line}");
    assert!(marker_says_mounted(&target));
    same_files(&ds, &target, &dataset_files(&ds));
    let (code, _, err) = stage(&ds, &target, &["--mount"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("reusing"), "{err}");
    assert!(!err.contains("not a tmpfs of bale's own"), "{err}");
    unstage_unmounts(&target);

    // A copy staged there in small pages first.
    let (code, _, err) = stage(&ds, &target, &[]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = stage(&ds, &target, &["--mount"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("reusing"), "{err}");
    assert!(
        err.contains("is not a tmpfs of bale's own, so not in 2 MiB pages: `bale unstage` it"),
        "{err}"
    );
    assert!(!is_mounted(&target));
    std::fs::remove_file(target.join("bale.json")).unwrap();
    let (code, _, err) = stage(&ds, &target, &["--mount"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("holds a staged copy outside a tmpfs of bale's own"),
        "{err}"
    );
    assert!(!is_mounted(&target), "nothing is mounted over the copy");
    let out = bale(&["unstage", s(&target)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A tmpfs bale mounts has `bale-stage` for its source, which makes it
/// bale's before its marker is written. A run killed in between (the state
/// is made here by mounting such a tmpfs by hand) leaves an empty one
/// without a marker: `bale unstage` unmounts it, and a rerun of `bale stage
/// --mount` stages into it and marks it mounted. An empty tmpfs of anyone
/// else's, or one of bale's holding files without a marker, is refused.
#[test]
fn a_tmpfs_of_bale_s_left_without_a_marker_is_filled_or_unmounted() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("t");
    let Some(_guard) = test_tmpfs_from("bale-stage", &target, "mode=0755") else {
        let (code, _, err) = stage(&ds, &target, &["--mount"]);
        assert_eq!(code, 2, "{err}");
        return;
    };
    unstage_unmounts(&target);
    // Killed while it wrote the marker: a temporary file of bale's is all there is.
    let _guard = test_tmpfs_from("bale-stage", &target, "mode=0755").unwrap();
    std::fs::write(target.join(".bale-tmp-1234-0"), b"{").unwrap();
    unstage_unmounts(&target);

    let _guard = test_tmpfs_from("bale-stage", &target, "mode=0755").unwrap();
    std::fs::write(target.join(".bale-tmp-1234-0"), b"{").unwrap();
    let (code, out, err) = stage(&ds, &target, &["--mount"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}\n", target.display()));
    assert!(
        err.contains("is a tmpfs bale mounted already: not mounting"),
        "{err}"
    );
    assert_eq!(mounts_at(&target).len(), 1, "nothing mounted over it");
    assert!(marker_says_mounted(&target));
    assert!(!target.join(".bale-tmp-1234-0").exists());
    same_files(&ds, &target, &dataset_files(&ds));
    unstage_unmounts(&target);

    // Someone's tmpfs moved onto a tmpfs of bale's (listed before it in
    // /proc/self/mountinfo), and a bind mount of a folder inside one of
    // bale's: neither is bale's to unmount.
    let theirs = tmp.path().join("theirs");
    let bind = tmp.path().join("bind");
    let _mine = test_tmpfs_from("tmpfs", &theirs, "mode=0755").unwrap();
    let _guard = test_tmpfs_from("bale-stage", &target, "mode=0755").unwrap();
    let moved = Command::new("mount")
        .args(["--move", s(&theirs), s(&target)])
        .status()
        .unwrap();
    assert!(moved.success());
    let out = bale(&["unstage", s(&target)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(mounts_at(&target).len(), 2, "both still mounted");
    let _ = Command::new("umount").arg(&target).status();
    std::fs::create_dir_all(target.join("sub")).unwrap();
    std::fs::create_dir_all(&bind).unwrap();
    let bound = Command::new("mount")
        .args(["--bind", s(&target.join("sub")), s(&bind)])
        .status()
        .unwrap();
    assert!(bound.success());
    let _bound = Unmount(bind.clone());
    let out = bale(&["unstage", s(&bind)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(is_mounted(&bind));
    let _ = Command::new("umount").arg(&bind).status();
    std::fs::remove_dir(target.join("sub")).unwrap();
    unstage_unmounts(&target);

    // Anyone else's empty tmpfs, and one of bale's with a file bale did not write.
    for (source, file) in [("tmpfs", None), ("bale-stage", Some("notes.txt"))] {
        let _guard = test_tmpfs_from(source, &target, "mode=0755").unwrap();
        if let Some(f) = file {
            std::fs::write(target.join(f), b"mine").unwrap();
        }
        let out = bale(&["unstage", s(&target), "--force"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("is not a bale staging folder"),
            "{}",
            text(&out.stderr)
        );
        assert!(is_mounted(&target), "{source}");
        if let Some(f) = file {
            assert_eq!(std::fs::read(target.join(f)).unwrap(), b"mine");
        }
    }
}

/// On a tmpfs that keeps its files in 2 MiB pages already, `--mount` mounts
/// nothing and says why.
#[test]
fn mount_where_the_tmpfs_has_2_mib_pages_already_mounts_nothing() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    if !has_huge_pages() {
        return;
    }
    let Some(_ram) = test_tmpfs(&tmp.path().join("ram"), "huge=within_size") else {
        return;
    };
    let target = tmp.path().join("ram").join("t");
    let _guard = Unmount(target.clone());
    let (code, _, err) = stage(&ds, &target, &["--mount"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("is on a tmpfs that keeps files in 2 MiB pages already: not mounting"),
        "{err}"
    );
    assert!(!is_mounted(&target));
    assert!(!marker_says_mounted(&target));
    same_files(&ds, &target, &dataset_files(&ds));
    let out = bale(&["unstage", s(&target)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).starts_with("removed"));
}

// Regressions pinned when the engine moved into bale-reader: locking, bounded
// reads of untrusted files, checked sizes, named mismatches, checked reuse,
// memory figures and --allow-swap, no replacing of files bale did not write.

/// Runs `bale ARGS` with bounds: killed after `secs` seconds, no file it
/// writes may pass 64 MiB and its address space 4 GiB (an unbounded copy of
/// /dev/zero is stopped, not left to fill the disk or the memory).
fn bale_bounded(args: &[&str], secs: u32) -> (i32, String, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -f 131072; ulimit -v 4194304; exec timeout -s KILL {secs} \"$0\" \"$@\""
        ))
        .arg(bale_tests::bale_bin())
        .args(args)
        .output()
        .expect("cannot run bale");
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Waits for `child` at most `secs` seconds (then kills it and fails).
fn wait_bounded(mut child: std::process::Child, secs: u64) -> std::process::Output {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = child.kill();
            panic!("bale did not finish within {secs}s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn spawn_stage(ds: &Path, target: &Path, extra: &[&str]) -> std::process::Child {
    Command::new(bale_tests::bale_bin())
        .args(["stage", s(ds), "--to", s(target)])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot run bale")
}

fn edit_manifest(ds: &Path, edit: impl FnOnce(&mut Value)) {
    let path = ds.join("bale.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 1;
    std::fs::write(path, b).unwrap();
}

#[test]
fn stage_and_unstage_fail_at_once_when_another_run_holds_the_target() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    assert_eq!(stage(&ds, &target, &[]).0, 0);
    let lock = bale_format::files::DirLock::try_lock(&target).unwrap();
    let held = format!(
        "{} is being written by another bale command",
        target.display()
    );
    let t0 = std::time::Instant::now();
    let (code, out, err) = bale_bounded(&["stage", s(&ds), "--to", s(&target)], 20);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains(&held), "{err}");
    assert!(err.contains("hint: pass --wait"), "{err}");
    let (code, _, err) = bale_bounded(&["unstage", s(&target)], 20);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&held), "{err}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(15));
    assert!(target.join("bale.json").exists());
    drop(lock);
    assert!(bale(&["unstage", s(&target)]).status.success());
}

#[test]
fn stage_wait_waits_for_the_other_run_and_reuses_its_copy() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    assert_eq!(stage(&ds, &target, &[]).0, 0);
    let lock = bale_format::files::DirLock::try_lock(&target).unwrap();
    let mut child = spawn_stage(&ds, &target, &["--wait"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let early = child.try_wait().unwrap();
    drop(lock);
    let out = wait_bounded(child, 60);
    let err = text(&out.stderr);
    assert!(early.is_none(), "returned while the lock was held: {err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout), format!("{}\n", target.display()));
    assert!(
        err.contains(&format!(
            "waiting for another bale stage or unstage of {}",
            target.display()
        )),
        "{err}"
    );
    assert!(err.contains("reusing the complete staged copy"), "{err}");
}

#[test]
fn concurrent_stages_with_wait_make_one_copy() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    let children: Vec<_> = (0..3)
        .map(|_| spawn_stage(&ds, &target, &["--wait"]))
        .collect();
    let mut copies = 0;
    for c in children {
        let out = wait_bounded(c, 60);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert_eq!(text(&out.stdout), format!("{}\n", target.display()));
        if err.contains("6 files copied") {
            copies += 1;
        } else {
            assert!(err.contains("reusing the complete staged copy"), "{err}");
        }
    }
    assert_eq!(copies, 1);
    same_files(&ds, &target, &dataset_files(&ds));
}

#[test]
fn devices_fifos_and_oversized_files_are_refused_without_reading_them() {
    fn mkfifo(p: &Path) {
        std::fs::remove_file(p).unwrap();
        assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
    }
    fn link(p: &Path, to: &str) {
        std::fs::remove_file(p).unwrap();
        std::os::unix::fs::symlink(to, p).unwrap();
    }
    type Damage = fn(&Path);
    let cases: [(&str, Damage, &str); 6] = [
        (
            "shard-000000.tar",
            |p| mkfifo(p),
            "is a FIFO, not a regular file",
        ),
        (
            "shard-000001.tar",
            |p| link(p, "/dev/zero"),
            "is a device, not a regular file",
        ),
        (
            "shard-000002.idx",
            |p| link(p, "/dev/urandom"),
            "is a device, not a regular file",
        ),
        (
            "shard-000000.idx",
            |p| mkfifo(p),
            "is a FIFO, not a regular file",
        ),
        (
            "bale.json",
            |p| link(p, "/dev/zero"),
            "is a device, not a regular file",
        ),
        (
            // A sparse terabyte where the manifest records a small shard.
            "shard-000001.tar",
            |p| {
                let f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
                f.set_len(1 << 40).unwrap();
            },
            "has 1099511627776 bytes, the manifest records",
        ),
    ];
    for (file, damage, want) in cases {
        let tmp = scratch();
        let ds = tmp.path().join("ds");
        make_dataset(&ds, Compression::None, false);
        damage(&ds.join(file));
        let target = tmp.path().join("staged");
        let (code, out, err) = bale_bounded(&["stage", s(&ds), "--to", s(&target)], 20);
        assert_eq!((code, out.as_str()), (2, ""), "{file}: {err}");
        assert!(err.contains(&format!("{file} {want}")), "{file}: {err}");
        assert!(!target.exists(), "{file}: a refusal leaves nothing behind");
    }
}

#[test]
fn sizes_past_2_pow_64_in_the_manifest_are_refused() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    edit_manifest(&ds, |v| v["shards"][1]["bytes"] = u64::MAX.into());
    let target = tmp.path().join("staged");
    let (code, out, err) = bale_bounded(&["stage", s(&ds), "--to", s(&target)], 20);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains("its manifest records shard sizes that add up to more than 2^64 bytes"),
        "{err}"
    );
    assert!(!target.exists());
}

#[test]
fn a_wrong_shard_size_in_the_manifest_is_named() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    let m = make_dataset(&ds, Compression::None, false);
    let real = m.shards[1].bytes;
    edit_manifest(&ds, |v| {
        v["shards"][1]["bytes"] = (real + 512).into();
        v["bytes"] = (m.bytes + 512).into();
    });
    let target = tmp.path().join("staged");
    let (code, _, err) = stage(&ds, &target, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "shard-000001.idx does not match the manifest: the index describes a shard of {real} bytes, the manifest records {}",
            real + 512
        )),
        "{err}"
    );
    assert!(err.contains("hint: run `bale verify"), "{err}");
    assert!(!target.exists());
}

#[test]
fn a_reused_copy_is_checked_and_redone_when_damaged() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    let m = make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    assert_eq!(stage(&ds, &target, &[]).0, 0);
    // A damaged staged index, same size: found on reuse, copied again.
    let idx = target.join(&m.shards[1].index);
    let len = std::fs::metadata(&idx).unwrap().len() as usize;
    flip(&idx, len / 2);
    let (code, out, err) = stage(&ds, &target, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}\n", target.display()));
    assert!(err.contains("fails its check"), "{err}");
    assert!(
        err.contains("1 file copied") && err.contains("5 already in place"),
        "{err}"
    );
    same_files(&ds, &target, &dataset_files(&ds));
    // A damaged staged shard, same size: --verify hashes it, and it is copied again.
    flip(&target.join(&m.shards[2].file), 700);
    let (code, _, err) = stage(&ds, &target, &["--verify"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("fails its check") && err.contains("does not match the manifest's checksum"),
        "{err}"
    );
    assert!(err.contains("1 file copied"), "{err}");
    same_files(&ds, &target, &dataset_files(&ds));
    let (code, _, err) = stage(&ds, &target, &["--verify"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("reusing the complete staged copy"), "{err}");
}

#[test]
fn the_memory_refusal_states_its_figures_and_allow_swap_overrides_it() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    let (code, _, err) = stage(&ds, &target, &["--assume-mem", "50000000"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the copy needs "), "{err}");
    assert!(
        err.contains("plus a margin of 64.") && err.contains("(5% + 64 MiB) kept free: 64."),
        "{err}"
    );
    assert!(
        err.contains("the machine has 47.68 MiB available (MemAvailable)"),
        "{err}"
    );
    assert!(err.contains("or pass --allow-swap"), "{err}");
    assert!(!target.exists());
    let (code, out, err) = stage(&ds, &target, &["--assume-mem", "50000000", "--allow-swap"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}\n", target.display()));
    let help = text(&bale(&["stage", "--help"]).stdout);
    assert!(help.contains("5% + 64 MiB"), "{help}");
    assert!(
        help.contains("--allow-swap") && help.contains("swap"),
        "{help}"
    );
}

#[test]
fn stage_never_replaces_a_file_it_did_not_write() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let target = tmp.path().join("staged");
    assert_eq!(stage(&ds, &target, &[]).0, 0);
    // Another version, whose first shard lands where the user keeps a file.
    std::fs::remove_dir_all(&ds).unwrap();
    let m2 = make_dataset(&ds, Compression::Zstd, false);
    let mine = target.join(&m2.shards[0].file);
    std::fs::write(&mine, b"the user's").unwrap();
    let (code, out, err) = stage(&ds, &target, &[]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(&format!(
            "{} is in the way of the staged copy and bale did not write it",
            mine.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read(&mine).unwrap(), b"the user's");
    std::fs::remove_file(&mine).unwrap();
    let (code, _, err) = stage(&ds, &target, &[]);
    assert_eq!(code, 0, "{err}");
    same_files(&ds, &target, &dataset_files(&ds));
}

/// A folder given with `--to` that was there before the stage is the
/// user's: unstage empties it (and unmounts bale's tmpfs on it) but leaves
/// it, and says so; a restage keeps that. A folder bale made goes.
#[test]
fn unstage_leaves_a_folder_that_was_there_before_the_stage() {
    let tmp = scratch();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    for _ in 0..2 {
        let (code, _, err) = stage(&ds, &theirs, &[]);
        assert_eq!(code, 0, "{err}");
    }
    let out = bale(&["unstage", s(&theirs)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("was there before bale staged into it: left in place"),
        "{}",
        text(&out.stderr)
    );
    assert!(theirs.is_dir());
    assert!(std::fs::read_dir(&theirs).unwrap().next().is_none());

    let ours = tmp.path().join("ours");
    let (code, _, err) = stage(&ds, &ours, &[]);
    assert_eq!(code, 0, "{err}");
    let out = bale(&["unstage", s(&ours)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!ours.exists(), "{}", text(&out.stderr));

    // The same with bale's tmpfs mounted on the user's folder.
    let _guard = Unmount(theirs.clone());
    let (code, _, err) = stage(&ds, &theirs, &["--mount"]);
    if !can_mount(&tmp.path().join("probe")) {
        assert_eq!(code, 2, "{err}");
        return;
    }
    assert_eq!(code, 0, "{err}");
    assert!(is_mounted(&theirs));
    let out = bale(&["unstage", s(&theirs)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("unmounted and removed the staged copy"),
        "{}",
        text(&out.stderr)
    );
    assert!(!is_mounted(&theirs));
    assert!(theirs.is_dir());
}
