//! Tests of the staging engine on small generated datasets.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bale_format::Manifest;

use super::*;
use crate::testing::TestDataset;

/// Records what the engine reports.
#[derive(Default)]
struct Recorder {
    started: AtomicU64,
    bytes: AtomicU64,
    messages: Mutex<Vec<String>>,
}

impl StageProgress for Recorder {
    fn start(&self, bytes: u64) {
        self.started.store(bytes, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
    }
    fn bytes(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    fn more(&self, bytes: u64) {
        self.started.fetch_add(bytes, Ordering::Relaxed);
    }
    fn message(&self, text: &str) {
        self.messages.lock().unwrap().push(text.to_owned());
    }
}

impl Recorder {
    fn said(&self, fragment: &str) -> bool {
        self.messages
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.contains(fragment))
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    src: PathBuf,
    target: PathBuf,
    manifest: Manifest,
}

fn setup(shards: u64) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("ds");
    std::fs::create_dir(&src).unwrap();
    let manifest = TestDataset::new(40, shards).write(&src).unwrap();
    let target = dir.path().join("staged");
    Setup {
        _dir: dir,
        src,
        target,
        manifest,
    }
}

fn options(target: &Path) -> StageOptions {
    StageOptions {
        to: Some(target.to_path_buf()),
        jobs: 2,
        assume: Assume {
            free: Some(1 << 40),
            mem_available: Some(1 << 40),
            not_root: false,
        },
        ..StageOptions::default()
    }
}

fn same_files(a: &Path, b: &Path, m: &Manifest) {
    let mut names = vec![bale_format::MANIFEST_NAME.to_owned()];
    for e in &m.shards {
        names.push(e.file.clone());
        names.push(e.index.clone());
    }
    for n in names {
        assert_eq!(
            std::fs::read(a.join(&n)).unwrap(),
            std::fs::read(b.join(&n)).unwrap(),
            "{n}"
        );
    }
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 1;
    std::fs::write(path, b).unwrap();
}

fn stage_kind(e: &ReaderError) -> Option<&StageErrorKind> {
    match e {
        ReaderError::Stage { kind, .. } => Some(kind),
        ReaderError::StageUnfinished { source, .. } => stage_kind(source),
        _ => None,
    }
}

#[test]
fn a_copy_is_a_dataset_with_a_marker_and_counts_its_bytes() {
    let s = setup(3);
    let r = Recorder::default();
    let sum = stage(&s.src, &options(&s.target), &r).unwrap();
    assert_eq!(sum.target, s.target);
    assert_eq!(sum.source, std::fs::canonicalize(&s.src).unwrap());
    assert_eq!(
        (sum.files_copied, sum.files_kept, sum.reused),
        (6, 0, false)
    );
    let on_disk: u64 = s
        .manifest
        .shards
        .iter()
        .map(|e| e.bytes + std::fs::metadata(s.src.join(&e.index)).unwrap().len())
        .sum();
    assert_eq!(sum.bytes_copied, on_disk);
    let manifest_len = std::fs::metadata(Manifest::path_in(&s.src)).unwrap().len();
    assert_eq!(r.started.load(Ordering::Relaxed), on_disk + manifest_len);
    assert_eq!(r.bytes.load(Ordering::Relaxed), on_disk);
    same_files(&s.src, &s.target, &s.manifest);
    let marker = marker::read(&s.target).unwrap().unwrap();
    assert_eq!(marker.files.len(), 6);
    assert!(!marker.mounted);
    assert_eq!(crate::Dataset::open(&s.target).unwrap().len(), 40);
}

#[test]
fn resume_keeps_good_files_and_redoes_damaged_ones() {
    let s = setup(3);
    stage(&s.src, &options(&s.target), &()).unwrap();
    // Interrupted: no manifest, one shard missing, one damaged at the same
    // size, one index damaged, a temporary file left.
    std::fs::remove_file(s.target.join("bale.json")).unwrap();
    std::fs::remove_file(s.target.join(&s.manifest.shards[0].file)).unwrap();
    flip(&s.target.join(&s.manifest.shards[1].file), 700);
    flip(&s.target.join(&s.manifest.shards[2].index), 40);
    let temp = s.target.join(".bale-tmp-1-shard-000000.tar");
    std::fs::write(&temp, b"partial").unwrap();
    let kept = s.target.join(&s.manifest.shards[2].file);
    let kept_inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&kept).unwrap());

    let r = Recorder::default();
    let sum = stage(&s.src, &options(&s.target), &r).unwrap();
    assert!(r.said("resuming the half-finished staged copy"));
    assert_eq!((sum.files_copied, sum.files_kept), (3, 3));
    same_files(&s.src, &s.target, &s.manifest);
    assert!(!temp.exists());
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&kept).unwrap());
    assert_eq!(inode, kept_inode, "a good file is kept, not copied again");
}

#[test]
fn resume_checks_shards_without_a_whole_file_checksum_member_by_member() {
    let s = setup(2);
    // A manifest without shard_xxh3 (as `bale index` writes without --checksum).
    let mut m = s.manifest.clone();
    for e in &mut m.shards {
        e.shard_xxh3 = None;
    }
    std::fs::remove_file(Manifest::path_in(&s.src)).unwrap();
    m.write(&s.src).unwrap();
    stage(&s.src, &options(&s.target), &()).unwrap();
    std::fs::remove_file(s.target.join("bale.json")).unwrap();
    // Damage the first member's data (right after its header), same size.
    flip(&s.target.join(&m.shards[0].file), 512);
    let sum = stage(&s.src, &options(&s.target), &()).unwrap();
    assert_eq!((sum.files_copied, sum.files_kept), (1, 3));
    same_files(&s.src, &s.target, &m);
}

#[test]
fn reuse_checks_the_indexes_and_redoes_a_damaged_copy() {
    let s = setup(2);
    stage(&s.src, &options(&s.target), &()).unwrap();
    let r = Recorder::default();
    let sum = stage(&s.src, &options(&s.target), &r).unwrap();
    assert!(sum.reused && sum.files_copied == 0);
    assert!(r.said("reusing the complete staged copy"));

    flip(&s.target.join(&s.manifest.shards[1].index), 40);
    let r = Recorder::default();
    let sum = stage(&s.src, &options(&s.target), &r).unwrap();
    assert!(!sum.reused);
    assert!(
        r.said("fails its check"),
        "{:?}",
        r.messages.lock().unwrap()
    );
    assert!(!r.said("resuming"));
    assert_eq!((sum.files_copied, sum.files_kept), (1, 3));
    same_files(&s.src, &s.target, &s.manifest);
}

#[test]
fn verify_hashes_the_shards_of_a_reused_copy() {
    let s = setup(2);
    stage(&s.src, &options(&s.target), &()).unwrap();
    flip(&s.target.join(&s.manifest.shards[0].file), 700);
    // Without --verify a same-size shard is not read.
    assert!(stage(&s.src, &options(&s.target), &()).unwrap().reused);
    let mut o = options(&s.target);
    o.verify = true;
    let r = Recorder::default();
    let sum = stage(&s.src, &o, &r).unwrap();
    assert!(!sum.reused);
    assert!(r.said("does not match the manifest's checksum"));
    assert_eq!(sum.files_copied, 1);
    same_files(&s.src, &s.target, &s.manifest);
    let r = Recorder::default();
    assert!(stage(&s.src, &o, &r).unwrap().reused);
    assert!(r.said("(same manifest, verified)"));
}

#[test]
fn another_version_is_redone_and_files_bale_did_not_write_are_never_replaced() {
    let s = setup(2);
    stage(&s.src, &options(&s.target), &()).unwrap();
    std::fs::remove_dir_all(&s.src).unwrap();
    std::fs::create_dir(&s.src).unwrap();
    let m2 = TestDataset::new(40, 2)
        .compression(bale_format::Compression::Zstd)
        .write(&s.src)
        .unwrap();
    // A file of the user's where the new version's first shard goes.
    let mine = s.target.join(&m2.shards[0].file);
    std::fs::write(&mine, b"mine").unwrap();
    let e = stage(&s.src, &options(&s.target), &()).unwrap_err();
    assert!(
        matches!(stage_kind(&e), Some(StageErrorKind::ForeignFiles { files }) if files == std::slice::from_ref(&mine)),
        "{e}"
    );
    assert!(e.to_string().contains("bale did not write it"), "{e}");
    assert_eq!(std::fs::read(&mine).unwrap(), b"mine");
    std::fs::remove_file(&mine).unwrap();
    let r = Recorder::default();
    stage(&s.src, &options(&s.target), &r).unwrap();
    assert!(r.said("another version of the dataset"));
    same_files(&s.src, &s.target, &m2);
    assert!(!s.target.join(&s.manifest.shards[0].file).exists());
}

#[test]
fn refusals_leave_nothing_behind() {
    let s = setup(2);
    let mut o = options(&s.target);
    o.assume.free = Some(1000);
    let e = stage(&s.src, &o, &()).unwrap_err();
    assert!(matches!(
        stage_kind(&e),
        Some(StageErrorKind::NoSpace { free: 1000, .. })
    ));
    assert!(!s.target.exists());
    let mut o = options(&s.target);
    o.assume.mem_available = Some(1000);
    let e = stage(&s.src, &o, &()).unwrap_err();
    assert!(matches!(
        stage_kind(&e),
        Some(StageErrorKind::NoMemory { .. })
    ));
    assert!(!s.target.exists());
    o.allow_swap = true;
    stage(&s.src, &o, &()).unwrap();
    // Nested targets.
    let e = stage(&s.src, &options(&s.src.join("inside")), &()).unwrap_err();
    assert_eq!(stage_kind(&e), Some(&StageErrorKind::Nested));
    let e = stage(&s.src, &options(&s.src.join("x/../inside")), &()).unwrap_err();
    assert_eq!(stage_kind(&e), Some(&StageErrorKind::Nested));
    assert!(!s.src.join("inside").exists() && !s.src.join("x").exists());
}

#[test]
fn a_locked_target_fails_at_once_or_is_waited_for() {
    let s = setup(2);
    stage(&s.src, &options(&s.target), &()).unwrap();
    let lock = DirLock::try_lock(&s.target).unwrap();
    let e = stage(&s.src, &options(&s.target), &()).unwrap_err();
    assert!(
        matches!(e, ReaderError::Format(FormatError::Locked { .. })),
        "{e}"
    );
    let e = unstage(&s.target, false).unwrap_err();
    assert!(
        matches!(e, ReaderError::Format(FormatError::Locked { .. })),
        "{e}"
    );
    let mut o = options(&s.target);
    o.wait = true;
    let r = Recorder::default();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| stage(&s.src, &o, &r));
        while !r.said("waiting for another bale stage") {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(lock);
        assert!(waiter.join().unwrap().unwrap().reused);
    });
}

#[test]
fn unstage_removes_only_what_bale_wrote() {
    let s = setup(2);
    stage(&s.src, &options(&s.target), &()).unwrap();
    let e = unstage(&s.src, false).unwrap_err();
    assert_eq!(stage_kind(&e), Some(&StageErrorKind::NotStagingFolder));
    std::fs::write(s.target.join("notes.txt"), b"not bale's").unwrap();
    let e = unstage(&s.target, false).unwrap_err();
    assert!(
        matches!(stage_kind(&e), Some(StageErrorKind::ForeignFiles { files }) if files.len() == 1)
    );
    assert!(s.target.join("bale.json").exists());
    let sum = unstage(&s.target, true).unwrap();
    assert_eq!(sum.files, 7);
    assert!(!sum.unmounted);
    assert!(!s.target.exists());
    assert!(s.src.join("bale.json").exists());
}

#[test]
fn another_users_default_root_sends_the_copy_to_a_root_of_ones_own() {
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let base = t.path().join("bale");
    let me = fs::metadata(t.path()).unwrap().uid();
    let own = t.path().join(format!("bale-{me}"));
    // Absent, or this user's: the documented place.
    assert_eq!(super::root_for(&base, me), base);
    fs::create_dir(&base).unwrap();
    assert_eq!(super::root_for(&base, me), base);
    // Seen by another user (the folder is not theirs): their own.
    assert_eq!(
        super::root_for(&base, me + 1),
        t.path().join(format!("bale-{}", me + 1))
    );
    // A symlink of this user's stays, to be refused with its reason; one of
    // another user's is passed by.
    fs::remove_dir(&base).unwrap();
    std::os::unix::fs::symlink(t.path(), &base).unwrap();
    assert_eq!(super::root_for(&base, me), base);
    assert_eq!(
        super::root_for(&base, me + 1),
        t.path().join(format!("bale-{}", me + 1))
    );
    // A file there is not a folder of anyone's: lock_target names it.
    fs::remove_file(&base).unwrap();
    fs::write(&base, b"x").unwrap();
    assert_eq!(super::root_for(&base, me + 1), base);
    assert!(!own.exists());
}

#[test]
fn the_default_place_is_refused_when_another_user_could_redirect_the_copy() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let refused = |p: &Path| {
        matches!(
            super::refuse_unsafe_place(p),
            Err(ReaderError::Stage { ref what, .. }) if what.contains("refusing to stage into")
        )
    };
    // Absent (the run makes it), or a folder of this user: fine.
    assert!(super::refuse_unsafe_place(&t.path().join("absent")).is_ok());
    let own = t.path().join("own");
    fs::create_dir(&own).unwrap();
    fs::set_permissions(&own, fs::Permissions::from_mode(0o755)).unwrap();
    assert!(super::refuse_unsafe_place(&own).is_ok());
    // Everyone may write: only with the sticky bit, as /tmp.
    fs::set_permissions(&own, fs::Permissions::from_mode(0o777)).unwrap();
    assert!(refused(&own));
    fs::set_permissions(&own, fs::Permissions::from_mode(0o1777)).unwrap();
    assert!(super::refuse_unsafe_place(&own).is_ok());
    // A symlink, even to a folder of this user.
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&own, &link).unwrap();
    assert!(refused(&link));
    // A folder of another user (root can give it away to test this).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = t.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        assert!(refused(&theirs));
    }
}
