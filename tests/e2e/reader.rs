//! The reader library over real `bale pack` output: every sample's key, label
//! and field bytes through `Dataset::get`, `get_by_key` and every epoch plan
//! (each partition, with and without prefetch, both backings), checked
//! against the files on disk. Packs plain, `--compress zstd`, `--labels dir`
//! and `--shuffle`, in shards small enough that every plan crosses shards.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;

use bale_reader::{Backing, Dataset, EpochPlan, Partition, Sample, SampleIter};
use bale_tests::bale_bin;

/// Class directories of the tree, deliberately not in byte-wise order here.
const CLASSES: [&str; 3] = ["ant", "Bee", "cat_2"];

/// What a sample must hold: its class directory and its members by extension.
#[derive(Debug)]
struct Expected {
    class: String,
    members: BTreeMap<String, Vec<u8>>,
}

/// Writes a tree of `n` samples: a `.jpg` each of varied size (some empty),
/// a `.json` on every 5th, a two-dot extension on every 7th, and a
/// sample one directory deeper in the last class. Returns what each key holds.
fn tree(root: &Path, n: usize) -> BTreeMap<String, Expected> {
    let mut want = BTreeMap::new();
    for i in 0..n {
        let class = CLASSES[i % CLASSES.len()];
        let rel_dir = if i == n - 1 {
            format!("{class}/deep")
        } else {
            class.to_owned()
        };
        let dir = root.join(&rel_dir);
        fs::create_dir_all(&dir).unwrap();
        let stem = format!("s{:04}", (i * 7919) % 10_000);
        let mut members = BTreeMap::new();
        let len = if i % 11 == 0 {
            0
        } else {
            300 + (i * 1237) % 5000
        };
        let jpg: Vec<u8> = (0..len).map(|j| ((i * 131 + j * 7) % 251) as u8).collect();
        members.insert("jpg".to_owned(), jpg);
        if i % 5 == 0 {
            members.insert("json".to_owned(), format!("{{\"i\": {i}}}").into_bytes());
        }
        if i % 7 == 0 {
            members.insert("seg.png".to_owned(), vec![i as u8; 100 + i]);
        }
        for (ext, data) in &members {
            fs::write(dir.join(format!("{stem}.{ext}")), data).unwrap();
        }
        want.insert(
            format!("{rel_dir}/{stem}"),
            Expected {
                class: class.to_owned(),
                members,
            },
        );
    }
    want
}

/// Runs `bale pack <args> -o out input` and checks it succeeded.
fn pack(input: &Path, out: &Path, args: &[&str]) {
    let o = Command::new(bale_bin())
        .arg("pack")
        .args(["--shard-size", "24KiB", "--quiet"])
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(input)
        .output()
        .expect("run bale");
    assert!(
        o.status.success(),
        "bale pack {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Checks that `s` is what the files on disk hold for its key, and returns the key.
fn check(ds: &Dataset, want: &BTreeMap<String, Expected>, labeled: bool, s: &Sample) -> String {
    let key = s.key().to_owned();
    let exp = want.get(&key).unwrap_or_else(|| {
        panic!(
            "{}: sample {} has the unknown key {key:?}",
            ds.dir().display(),
            s.index()
        )
    });
    let mut members: Vec<(String, Vec<u8>)> = exp
        .members
        .iter()
        .map(|(e, d)| (e.clone(), d.clone()))
        .collect();
    if labeled {
        let label = s.label().unwrap_or_else(|| panic!("{key}: no label"));
        assert_eq!(
            ds.label_name(label),
            Some(exp.class.as_str()),
            "{key}: label {label}"
        );
        members.push(("cls".to_owned(), label.to_string().into_bytes()));
    } else {
        assert_eq!(s.label(), None, "{key}");
    }
    // Members in extension order, byte-wise (docs/pack.md).
    members.sort();
    let got: Vec<(String, Vec<u8>)> = s
        .fields()
        .map(|(e, d)| (e.to_owned(), d.to_vec()))
        .collect();
    assert_eq!(got, members, "{key}: fields");
    for (ext, data) in &members {
        assert_eq!(s.field(ext), Some(data.as_slice()), "{key}.{ext}");
    }
    assert_eq!(
        s.data_len(),
        members.iter().map(|(_, d)| d.len()).sum::<usize>(),
        "{key}"
    );
    key
}

/// Every plan, every partition of 2 ranks x 2 workers (and the whole
/// dataset), with and without prefetch: each item is the sample the plan's
/// order names, with the bytes on disk, and the partitions of an epoch
/// together yield every sample once.
fn check_plans(ds: &Dataset, want: &BTreeMap<String, Expected>, labeled: bool) {
    let n = ds.len();
    let plans = [
        EpochPlan::Sequential,
        EpochPlan::shuffled(11, 0),
        EpochPlan::shuffled(11, 1),
        EpochPlan::shard_shuffled(11, 2, 5),
    ];
    let prefetches: [Option<(usize, usize, u64)>; 3] =
        [None, Some((3, 8, 16 << 10)), Some((2, 1, 1))];
    for plan in plans {
        for prefetch in prefetches {
            let with = |it: SampleIter| match prefetch {
                None => it,
                Some((t, s, b)) => it.prefetch(t, s, b),
            };
            let all: Vec<u64> = with(ds.iter(plan, Partition::ALL).unwrap())
                .map(|s| {
                    let s = s.unwrap();
                    check(ds, want, labeled, &s);
                    s.index()
                })
                .collect();
            assert_eq!(
                all,
                ds.order(plan, Partition::ALL)
                    .unwrap()
                    .iter()
                    .collect::<Vec<_>>(),
                "{plan:?} {prefetch:?}"
            );
            let mut seen = vec![0u32; n as usize];
            for rank in 0..2 {
                for worker in 0..2 {
                    let part = Partition::new(rank, 2).with_workers(worker, 2);
                    let order: Vec<u64> = ds.order(plan, part).unwrap().iter().collect();
                    let it = with(ds.iter(plan, part).unwrap());
                    assert_eq!(it.len(), order.len() as u64);
                    let got: Vec<u64> = it
                        .map(|s| {
                            let s = s.unwrap();
                            let key = check(ds, want, labeled, &s);
                            assert_eq!(ds.key(s.index()).unwrap(), key);
                            s.index()
                        })
                        .collect();
                    assert_eq!(got, order, "{plan:?} {part:?} {prefetch:?}");
                    for i in got {
                        seen[i as usize] += 1;
                    }
                }
            }
            assert!(
                seen.iter().all(|&c| c == 1),
                "{plan:?} {prefetch:?}: {seen:?}"
            );
        }
    }
}

/// Opens `out` with both backings and checks everything the reader offers
/// against `want`. Returns the keys in dataset order.
fn check_dataset(out: &Path, want: &BTreeMap<String, Expected>, labeled: bool) -> Vec<String> {
    let mut order = Vec::new();
    for backing in [Backing::Mmap, Backing::Pread] {
        for verify in [false, true] {
            let ds = Dataset::options()
                .backing(backing)
                .verify_on_read(verify)
                .open(out)
                .unwrap();
            assert_eq!(ds.len(), want.len() as u64);
            assert!(ds.shard_count() > 2, "{} shards", ds.shard_count());
            if labeled {
                let mut classes: Vec<String> = CLASSES.iter().map(|c| c.to_string()).collect();
                classes.sort();
                assert_eq!(ds.labels().unwrap(), classes.as_slice());
            } else {
                assert_eq!(ds.labels(), None);
            }
            let mut keys = Vec::new();
            for i in 0..ds.len() {
                let s = ds.get(i).unwrap();
                assert_eq!(s.index(), i);
                let key = check(&ds, want, labeled, &s);
                assert_eq!(ds.key(i).unwrap(), key);
                let by_key = ds.get_by_key(&key).unwrap();
                assert_eq!(by_key.index(), i, "{key}");
                check(&ds, want, labeled, &by_key);
                assert_eq!(ds.find(&key), Some(i));
                keys.push(key);
            }
            // Every key on disk is in the dataset, once.
            let distinct: BTreeSet<&String> = keys.iter().collect();
            assert_eq!(distinct.len(), want.len());
            assert!(ds.get_by_key("ant/no-such-sample").is_err());
            assert!(ds.get(ds.len()).is_err());
            if !verify {
                check_plans(&ds, want, labeled);
            }
            if order.is_empty() {
                order = keys;
            } else {
                assert_eq!(order, keys, "{backing:?}: another order");
            }
        }
    }
    order
}

fn sorted(keys: &[String]) -> bool {
    keys.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes())
}

#[test]
fn reader_reads_plain_zstd_labeled_and_shuffled_packs_byte_for_byte() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    let want = tree(&input, 90);
    let cases: [(&str, &[&str], bool); 5] = [
        // The deeper sample makes `--labels auto` resolve to none.
        ("plain", &[], false),
        ("zstd", &["--compress", "zstd"], false),
        ("dir", &["--labels", "dir"], true),
        (
            "dir-zstd",
            &["--labels", "dir", "--compress", "zstd:5"],
            true,
        ),
        (
            "shuffled",
            &["--labels", "dir", "--shuffle", "--seed", "3"],
            true,
        ),
    ];
    let mut plain_order = Vec::new();
    for (name, args, labeled) in cases {
        let out = t.path().join(name);
        pack(&input, &out, args);
        let zstd = args.iter().any(|a| a.starts_with("zstd"));
        let shards: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.ends_with(".tar") || f.ends_with(".tar.zst"))
            .collect();
        assert!(
            !shards.is_empty() && shards.iter().all(|f| f.ends_with(".tar.zst") == zstd),
            "{name}: {shards:?}"
        );
        let order = check_dataset(&out, &want, labeled);
        let mapped = Dataset::open(&out).unwrap().get(0).unwrap().is_mapped();
        assert_eq!(mapped, !zstd, "{name}");
        if name == "shuffled" {
            assert!(!sorted(&order), "{name}: --shuffle left the keys sorted");
            let mut s = order.clone();
            s.sort();
            assert_eq!(s, plain_order, "{name}: another set of keys");
        } else {
            assert!(sorted(&order), "{name}: keys not in byte-wise order");
            if plain_order.is_empty() {
                plain_order = order;
            } else {
                assert_eq!(order, plain_order, "{name}");
            }
        }
    }
}

/// A dataset repacked with `bale pack --force` into fewer shards, or a shard
/// cut short, under an open reader: the error names the shard, says it
/// changed, and is no damage of one sample's bytes, which a loader that
/// skips damaged samples would leave out (with every sample after it).
#[test]
fn a_shard_removed_replaced_or_cut_short_under_a_reader_is_no_damaged_sample() {
    use bale_reader::ReaderError;
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("tree");
    tree(&input, 120);
    let out = tmp.path().join("ds");
    pack(&input, &out, &[]);
    let shards = |dir: &Path| {
        fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("tar".as_ref()))
            .count()
    };
    assert!(shards(&out) >= 4, "{}", shards(&out));
    for backing in [Backing::Mmap, Backing::Pread] {
        let ds = Dataset::options().backing(backing).open(&out).unwrap();
        let last = ds.len() - 1;
        ds.get(0).unwrap();
        // Repacked into one shard, as `--force` does, under the reader.
        let o = Command::new(bale_bin())
            .args(["pack", "--quiet", "--force", "--shard-size", "1GiB", "-o"])
            .arg(&out)
            .arg(&input)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(shards(&out), 1);
        let err = ds.get(last).unwrap_err();
        assert!(
            matches!(err, ReaderError::ShardRemoved { .. }),
            "{backing:?}: {err}"
        );
        assert!(!err.is_sample_damage(), "{err}");
        assert!(err.to_string().contains("the shard was removed"), "{err}");
        // The shard opened before the repack still reads the file it opened.
        ds.get(1).unwrap();
        pack(&input, &out, &["--force"]);
    }
    // Cut short in place: read through the open descriptor (pread), or
    // before the shard is mapped (mmap; once mapped, a cut is SIGBUS, the
    // documented trade-off of the map).
    for (backing, shard, sample) in [
        (Backing::Pread, "shard-000000.tar", 0),
        (Backing::Mmap, "shard-000001.tar", 0),
    ] {
        let ds = Dataset::options().backing(backing).open(&out).unwrap();
        ds.get(sample).unwrap();
        let path = out.join(shard);
        let len = fs::metadata(&path).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        // The last samples of the cut shard lie past its new end.
        let s = (0..ds.len())
            .rev()
            .find(|&i| shard_name(&ds, i) == shard)
            .unwrap();
        let err = ds.get(s).unwrap_err();
        assert!(
            matches!(&err, ReaderError::ShardReplaced { path: p } if p.ends_with(shard)),
            "{backing:?}: {err}"
        );
        assert!(!err.is_sample_damage(), "{err}");
        pack(&input, &out, &["--force"]);
    }
}

/// The file name of the shard holding sample `i`.
fn shard_name(ds: &Dataset, i: u64) -> String {
    let s = ds.shard_of(i).unwrap();
    ds.manifest().shards[s].file.clone()
}
