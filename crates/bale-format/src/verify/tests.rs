//! Tests of the checks.

use super::*;
use crate::{CreatedBy, Member, ShardFileWriter};

fn dataset(dir: &Path, compression: Compression) -> Manifest {
    // A fresh dataset each time: writers never replace files.
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut shards = Vec::new();
    for s in 0..2u64 {
        let name = crate::shard_file_name("shard", s, compression);
        let mut w = ShardFileWriter::create(dir, &name, compression, 0).unwrap();
        for i in 0..5u64 {
            let key = format!("c{}/{:04}", i % 2, s * 10 + i);
            let data = vec![(i * 31 + s) as u8; 700 + i as usize * 100];
            let cls = (i % 2).to_string();
            w.writer()
                .write_sample(
                    &key,
                    &[
                        Member {
                            ext: "jpg",
                            data: &data,
                        },
                        Member {
                            ext: "cls",
                            data: cls.as_bytes(),
                        },
                    ],
                )
                .unwrap();
        }
        shards.push(w.finish().unwrap());
    }
    let created_by = CreatedBy {
        tool: "bale".into(),
        version: "0".into(),
        command: "test".into(),
        options: serde_json::Value::Null,
    };
    let m = Manifest::new(shards, Some(vec!["c0".into(), "c1".into()]), created_by);
    m.write(dir).unwrap();
    m
}

fn all(dir: &Path, level: Level) -> Vec<Problem> {
    let (m, mut p) = load_manifest(dir).unwrap();
    let m = m.unwrap();
    p.extend(check_manifest(dir, &m));
    for s in &m.shards {
        p.extend(check_shard(dir, s, level, &mut ()).problems);
    }
    p
}

#[test]
fn clean_datasets_have_no_problems() {
    for c in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let m = dataset(dir.path(), c);
        for level in [Level::Quick, Level::Full] {
            assert_eq!(all(dir.path(), level), vec![], "{c:?} {level:?}");
            let r = check_shard(dir.path(), &m.shards[0], level, &mut ());
            assert_eq!(r.samples_checked, 5);
            assert_eq!(r.members_checked, 10);
        }
        let r = check_shard(dir.path(), &m.shards[0], Level::Full, &mut ());
        assert_eq!(r.bytes_read, m.shards[0].bytes);
    }
}

#[test]
fn invalid_keys_in_an_index_are_found_by_verify_not_by_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = dataset(dir.path(), Compression::None);
    let idx_path = dir.path().join(&m.shards[0].index);
    let mut b = std::fs::read(&idx_path).unwrap();
    let at = b
        .windows(7)
        .position(|w| w == b"c0/0000")
        .expect("key in the string table");
    b[at..at + 7].copy_from_slice(b"../0000");
    let body = b.len() - 8;
    let sum = crate::hash::xxh3_64(&b[..body]);
    b[body..].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&idx_path, &b).unwrap();
    m.shards[0].index_xxh3 = hex64(sum);
    std::fs::remove_file(Manifest::path_in(dir.path())).unwrap();
    m.write(dir.path()).unwrap();
    // Opening stays cheap: it checks structure, not key syntax.
    let idx = ShardIndex::open(&idx_path).unwrap();
    assert_eq!(idx.key(0), "../0000");
    for level in [Level::Quick, Level::Full] {
        let p = all(dir.path(), level);
        assert!(
            p.iter()
                .any(|p| p.what.contains("index sample 0") && p.what.contains("'..'")),
            "{level:?}: {p:?}"
        );
    }
}

#[test]
fn flipped_member_bit_is_named_at_full_level_only() {
    let dir = tempfile::tempdir().unwrap();
    let m = dataset(dir.path(), Compression::None);
    let idx = ShardIndex::open(dir.path().join(&m.shards[1].index)).unwrap();
    let mem = idx.members(2).next().unwrap();
    let path = dir.path().join(&m.shards[1].file);
    let mut b = std::fs::read(&path).unwrap();
    b[mem.offset as usize + 3] ^= 0x10;
    std::fs::write(&path, b).unwrap();
    let p = all(dir.path(), Level::Full);
    let hit = p
        .iter()
        .find(|p| p.key.is_some())
        .expect("a member problem");
    assert_eq!(hit.shard, "shard-000001.tar");
    assert_eq!(hit.key.as_deref(), Some(idx.key(2)));
    assert_eq!(hit.member.as_deref(), Some("jpg"));
    assert!(hit.what.contains("checksum mismatch"), "{hit}");
    assert!(
        p.iter().any(|p| p.what.contains("shard checksum mismatch")),
        "{p:?}"
    );
    assert_eq!(all(dir.path(), Level::Quick), vec![]);
}

#[test]
fn flipped_header_bit_is_found_by_quick() {
    for c in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let m = dataset(dir.path(), c);
        if c == Compression::Zstd {
            // Damage inside the dictionary's frame (the shard's own copy),
            // then inside a sample's frame (which then no longer
            // decompresses to the same tar).
            let path = dir.path().join(&m.shards[0].file);
            let clean = std::fs::read(&path).unwrap();
            let idx = ShardIndex::open(dir.path().join(&m.shards[0].index)).unwrap();
            assert!(
                !idx.zstd_dict().is_empty(),
                "small samples get a dictionary"
            );
            for at in [20, idx.sample(1).file_offset as usize + 6] {
                let mut b = clean.clone();
                b[at] ^= 0xff;
                std::fs::write(&path, b).unwrap();
                assert!(!all(dir.path(), Level::Quick).is_empty(), "byte {at}");
                assert!(!all(dir.path(), Level::Full).is_empty(), "byte {at}");
            }
            continue;
        }
        let path = dir.path().join(&m.shards[0].file);
        let mut b = std::fs::read(&path).unwrap();
        b[3] ^= 1; // the first header's name
        std::fs::write(&path, b).unwrap();
        let p = all(dir.path(), Level::Quick);
        assert!(
            p.iter()
                .any(|p| p.what.contains("tar header") && p.offset == Some(0)),
            "{p:?}"
        );
        let p = all(dir.path(), Level::Full);
        assert!(p.iter().any(|p| p.what.contains("tar stream")), "{p:?}");
    }
}

#[test]
fn missing_truncated_and_unknown_files() {
    let dir = tempfile::tempdir().unwrap();
    let m = dataset(dir.path(), Compression::None);
    std::fs::remove_file(dir.path().join(&m.shards[0].file)).unwrap();
    let p1 = dir.path().join(&m.shards[1].file);
    let len = std::fs::metadata(&p1).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p1)
        .unwrap()
        .set_len(len - 700)
        .unwrap();
    std::fs::write(dir.path().join("shard-000009.tar"), b"x").unwrap();
    std::fs::write(
        dir.path().join(format!("{TEMP_PREFIX}1-shard-000002.tar")),
        b"x",
    )
    .unwrap();
    for level in [Level::Quick, Level::Full] {
        let p = all(dir.path(), level);
        let text: Vec<String> = p.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t == "shard-000000.tar: shard file is missing"),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("shard-000001.tar: shard is truncated")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.starts_with("shard-000009.tar: unknown shard")),
            "{text:?}"
        );
        let w = p.iter().find(|p| p.severity == Severity::Warning).unwrap();
        assert!(w.what.contains("temporary"), "{w}");
    }
}

#[test]
fn manifest_count_off_by_one_is_a_finding() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = dataset(dir.path(), Compression::None);
    m.samples += 1;
    std::fs::write(dir.path().join(MANIFEST_NAME), m.to_bytes()).unwrap();
    let p = all(dir.path(), Level::Full);
    assert!(
        p.iter()
            .any(|p| p.shard == MANIFEST_NAME && p.what.contains("samples is 11")),
        "{p:?}"
    );
    // Off by one in a shard entry (totals kept consistent): the index disagrees.
    let mut m = dataset(dir.path(), Compression::None);
    m.shards[1].samples -= 1;
    m.samples -= 1;
    std::fs::remove_file(Manifest::path_in(dir.path())).unwrap();
    m.write(dir.path()).unwrap();
    let p = all(dir.path(), Level::Quick);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        p[0].to_string(),
        "shard-000001.tar: index records 5 samples, the manifest records 4"
    );
}

#[test]
fn flipped_index_bit_and_not_a_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let m = dataset(dir.path(), Compression::None);
    let path = dir.path().join(&m.shards[0].index);
    let mut b = std::fs::read(&path).unwrap();
    b[70] ^= 4;
    std::fs::write(&path, b).unwrap();
    let p = all(dir.path(), Level::Quick);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].what.starts_with("index shard-000000.idx is damaged")
            && p[0].what.contains("checksum mismatch")
    );
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        load_manifest(empty.path()),
        Err(FormatError::Incomplete { .. })
    ));
    assert!(load_manifest(&empty.path().join("nope")).is_err());
}

#[test]
fn checksums_summary_and_warning() {
    let report = |shard: &str, sums: Option<bool>| ShardReport {
        shard: shard.into(),
        member_checksums: sums,
        ..ShardReport::default()
    };
    let all = [report("a.tar", Some(true)), report("b.tar", None)];
    assert_eq!(Checksums::of(&all), Checksums::Present);
    assert_eq!(checksums_warning(&all), None);
    let none = [report("a.tar", Some(false)), report("b.tar", Some(false))];
    assert_eq!(Checksums::of(&none), Checksums::Absent);
    let w = checksums_warning(&none).unwrap();
    assert_eq!(
        (w.shard.as_str(), w.severity),
        (MANIFEST_NAME, Severity::Warning)
    );
    assert!(w.what.contains("all 2 shards record none"), "{w}");
    let some: Vec<ShardReport> = (0..6)
        .map(|i| report(&format!("s{i}.tar"), Some(i % 3 == 0)))
        .collect();
    assert_eq!(Checksums::of(&some), Checksums::Partial);
    let w = checksums_warning(&some).unwrap();
    assert!(
        w.what
            .contains("the indexes of 4 of 6 shards record none (s1.tar, s2.tar, s4.tar, ...)"),
        "{w}"
    );
    // The pack fixture's indexes record checksums: no warning, and the report says so.
    let dir = tempfile::tempdir().unwrap();
    let m = dataset(dir.path(), Compression::None);
    let r = check_shard(dir.path(), &m.shards[0], Level::Quick, &mut ());
    assert_eq!(r.member_checksums, Some(true));
}

#[test]
fn name_rules_follow_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = dataset(dir.path(), Compression::None);
    assert!(!NameRules::for_manifest(&m).renamed_splits);
    m.created_by.command = "index".into();
    m.created_by.options = serde_json::json!({ "rename_split": true });
    assert!(NameRules::for_manifest(&m).renamed_splits);
    m.created_by.command = "pack".into();
    assert!(!NameRules::for_manifest(&m).renamed_splits);
    let r = NameRules {
        renamed_splits: true,
    };
    assert!(r.key_matches("a", "a") && r.key_matches("a~10", "a"));
    assert!(
        !r.key_matches("a~02", "a") && !r.key_matches("a~", "a") && !r.key_matches("ab~2", "a")
    );
}

#[test]
fn visitor_sees_every_member_and_progress_sums_to_the_file() {
    struct V(u64, Vec<String>);
    impl Visitor for V {
        fn member(&mut self, key: &str, ext: &str, _: &[u8]) -> Option<String> {
            self.1.push(format!("{key}.{ext}"));
            (ext == "cls" && key.ends_with("0003")).then(|| "bad label".to_string())
        }
        fn progress(&mut self, bytes: u64) {
            self.0 += bytes;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let m = dataset(dir.path(), Compression::Zstd);
    let mut v = V(0, Vec::new());
    let r = check_shard(dir.path(), &m.shards[0], Level::Full, &mut v);
    assert_eq!(v.0, m.shards[0].bytes);
    assert_eq!(v.1.len(), 10);
    assert_eq!(r.problems.len(), 1);
    assert_eq!(
        r.problems[0]
            .to_string()
            .split(" at offset")
            .next()
            .unwrap(),
        "shard-000000.tar.zst: key \"c1/0003\" member \"cls\""
    );
}
