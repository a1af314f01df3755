//! HDF5 shards through the real binary (feature `hdf5`): `bale pack --format
//! h5` output that h5py reads (same bytes, keys and labels), the dense array
//! that numpy compares equal to the `.npy` files, `verify` on h5 shards, and
//! the round trip tar -> h5 -> tar.zst -> tar.

use std::ffi::OsStr;
use std::fs;
use std::path::Path;

use bale_format::{Compression, Manifest};
use bale_tests::run_python;

use crate::common::samples;
use crate::convert::{bale, ok, text, tree};

fn os(p: &Path) -> &OsStr {
    p.as_os_str()
}

/// Reads every h5 shard of a dataset with h5py and checks each member's
/// bytes against the file it was packed from, the keys, and the labels.
const H5PY_READS_OUR_SHARDS: &str = r#"
import json, os, sys
import h5py, numpy as np
out, tree = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(out, "bale.json")))
names = m["labels"]
n = members = 0
for s in m["shards"]:
    with h5py.File(os.path.join(out, s["file"]), "r") as f:
        keys = [k.decode() for k in f["keys"][:]]
        assert len(keys) == s["samples"], (len(keys), s["samples"])
        labels = f["labels"][:]
        assert labels.dtype == np.int64
        for ext in f["fields"]:
            g = f["fields"][ext]
            off = g["offsets"][:]
            assert off.shape == (len(keys) + 1,)
            assert g["data"].dtype == np.uint8 and g["data"].chunks is None
            present = g["present"][:] if "present" in g else np.ones(len(keys), np.uint8)
            for i, key in enumerate(keys):
                path = os.path.join(tree, key + "." + ext)
                if ext == "cls":
                    assert bytes(g["data"][off[i]:off[i + 1]]) == str(labels[i]).encode()
                    continue
                assert bool(present[i]) == os.path.exists(path), (key, ext)
                if present[i]:
                    got = g["data"][off[i]:off[i + 1]].tobytes()
                    assert got == open(path, "rb").read(), (key, ext)
                    members += 1
        for i, key in enumerate(keys):
            assert names[labels[i]] == key.split("/")[0], (key, labels[i])
        n += len(keys)
print(n, members)
"#;

#[test]
fn h5py_reads_the_bytes_keys_and_labels_of_our_shards() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 30);
    let out = t.path().join("out");
    ok(&bale(
        &["pack", "--format", "h5", "--shard-size", "16KiB", "-o"],
        &[&out, &input],
    ));
    let m = Manifest::read(&out).unwrap();
    assert!(m.shards.len() > 1);
    assert!(m.shards.iter().all(|s| s.compression == Compression::H5
        && s.file.ends_with(".h5")
        && s.index.ends_with(".idx")));
    let printed = run_python(H5PY_READS_OUR_SHARDS, &[os(&out), os(&input)]).unwrap();
    // 30 jpg, 10 json, 6 seg.png read and compared.
    assert_eq!(printed.trim(), "30 46");
    ok(&bale(&["verify"], &[&out]));
    ok(&bale(&["verify", "--quick"], &[&out]));
    // The same pack as tar holds the same samples.
    let tar = t.path().join("tar");
    ok(&bale(
        &["pack", "--shard-size", "16KiB", "-o"],
        &[&tar, &input],
    ));
    assert_eq!(samples(&tar), samples(&out));
    // Deterministic: the same input gives the same bytes.
    let again = t.path().join("again");
    ok(&bale(
        &["pack", "--format", "h5", "--shard-size", "16KiB", "-o"],
        &[&again, &input],
    ));
    for s in &m.shards {
        assert_eq!(
            fs::read(out.join(&s.file)).unwrap(),
            fs::read(again.join(&s.file)).unwrap()
        );
    }
}

#[test]
fn verify_finds_a_flipped_byte_in_an_h5_shard() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 9);
    let out = t.path().join("out");
    ok(&bale(&["pack", "--format", "h5", "-o"], &[&out, &input]));
    let m = Manifest::read(&out).unwrap();
    let shard = out.join(&m.shards[0].file);
    let r = bale_format::read::ShardReader::open(&shard, out.join(&m.shards[0].index)).unwrap();
    let jpg = r.index().members(4).find(|m| m.ext == "jpg").unwrap();
    let key = r.index().key(4).to_owned();
    let mut bytes = fs::read(&shard).unwrap();
    bytes[(jpg.offset + 10) as usize] ^= 1;
    fs::write(&shard, bytes).unwrap();
    let o = bale(&["verify", "--json"], &[&out]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains(&key) && s.contains("jpg"), "{}", text(&o));
    assert!(
        s.contains(&format!("{}", jpg.offset)),
        "names the offset: {}",
        text(&o)
    );
    let o = bale(&["get"], &[&out, Path::new(&key)]);
    assert!(
        !o.status.success(),
        "a read checks the member: {}",
        text(&o)
    );
}

/// Writes `n` uint8 arrays of shape (h, w, 3) as `.npy` files with numpy.
const WRITE_NPY_TREE: &str = r#"
import os, sys
import numpy as np
root, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
for i in range(n):
    d = os.path.join(root, "img")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "%04d.npy" % i), rng.integers(0, 256, (8, 6, 3), dtype=np.uint8))
    open(os.path.join(d, "%04d.txt" % i), "w").write("caption %d" % i)
"#;

/// Compares `dense/npy` of every shard with the `.npy` files.
const DENSE_EQUALS_NUMPY: &str = r#"
import json, os, sys
import h5py, numpy as np
out, tree = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(out, "bale.json")))
n = 0
for s in m["shards"]:
    with h5py.File(os.path.join(out, s["file"]), "r") as f:
        d = f["dense/npy"]
        assert d.dtype == np.uint8 and d.shape[1:] == (8, 6, 3), d
        assert d.chunks == (1, 8, 6, 3), d.chunks
        for i, k in enumerate(f["keys"].asstr()[:]):
            want = np.load(os.path.join(tree, k + ".npy"))
            assert np.array_equal(d[i], want), k
            off = f["fields/npy/offsets"]
            raw = f["fields/npy/data"][off[i]:off[i + 1]].tobytes()
            assert raw == open(os.path.join(tree, k + ".npy"), "rb").read(), k
            n += 1
print(n)
"#;

#[test]
fn converting_npy_samples_to_h5_gives_a_dense_array_equal_in_numpy() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    run_python(WRITE_NPY_TREE, &[os(&input), OsStr::new("12")]).unwrap();
    let tar = t.path().join("tar");
    ok(&bale(&["pack", "-o"], &[&tar, &input]));
    let h5 = t.path().join("h5");
    ok(&bale(
        &["convert", "--format", "h5", "--shard-samples", "5"],
        &[&tar, Path::new("-o"), &h5],
    ));
    assert_eq!(Manifest::read(&h5).unwrap().shards.len(), 3);
    let printed = run_python(DENSE_EQUALS_NUMPY, &[os(&h5), os(&input)]).unwrap();
    assert_eq!(printed.trim(), "12");
    ok(&bale(&["verify"], &[&h5]));
    // A mixed shape leaves no dense array (the bytes are still there).
    run_python(
        "import numpy as np, sys; np.save(sys.argv[1], np.zeros((4, 4, 3), np.uint8))",
        &[os(&input.join("img/0003.npy"))],
    )
    .unwrap();
    let mixed = t.path().join("mixed");
    ok(&bale(&["pack", "--format", "h5", "-o"], &[&mixed, &input]));
    let printed = run_python(
        "import h5py, sys, glob; f = h5py.File(glob.glob(sys.argv[1] + '/*.h5')[0]); print('dense' in f, f['fields/npy/offsets'].shape)",
        &[os(&mixed)],
    )
    .unwrap();
    assert_eq!(printed.trim(), "False (13,)");
}

#[test]
fn round_trip_tar_h5_tar_zst_tar_gives_the_same_samples_and_bytes() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 25);
    let a = t.path().join("a");
    ok(&bale(
        &["pack", "--shard-size", "12KiB", "-o"],
        &[&a, &input],
    ));
    let mut prev = a.clone();
    for (name, format) in [("h5", "h5"), ("zst", "tar.zst"), ("tar", "tar")] {
        let next = t.path().join(name);
        ok(&bale(
            &["convert", "--format", format, "--shard-size", "12KiB"],
            &[&prev, Path::new("-o"), &next],
        ));
        ok(&bale(&["verify"], &[&next]));
        assert_eq!(samples(&a), samples(&next), "{format}");
        prev = next;
    }
    let ma = Manifest::read(&a).unwrap();
    let mb = Manifest::read(&prev).unwrap();
    assert_eq!(ma.labels, mb.labels);
    assert_eq!(ma.shards.len(), mb.shards.len());
    for (x, y) in ma.shards.iter().zip(&mb.shards) {
        assert_eq!(
            fs::read(a.join(&x.file)).unwrap(),
            fs::read(prev.join(&y.file)).unwrap(),
            "{}",
            x.file
        );
    }
}

#[test]
fn h5_datasets_serve_ls_get_and_stat() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 6);
    let out = t.path().join("out");
    ok(&bale(&["pack", "--format", "h5", "-o"], &[&out, &input]));
    let o = bale(
        &["get", "--ext", "jpg"],
        &[&out, Path::new("class_1/00004")],
    );
    ok(&o);
    assert_eq!(o.stdout, fs::read(input.join("class_1/00004.jpg")).unwrap());
    let o = bale(&["ls"], &[&out]);
    ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        6,
        "{}",
        text(&o)
    );
    let o = bale(&["stat", "--json"], &[&out]);
    ok(&o);
    let stat: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(stat["compression"], "h5", "{}", text(&o));
}

#[test]
fn h5_parts_merge_into_one_dataset() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 14);
    let whole = t.path().join("whole");
    ok(&bale(&["pack", "--format", "h5", "-o"], &[&whole, &input]));
    let parts: Vec<_> = (0..2).map(|i| t.path().join(format!("p{i}"))).collect();
    for (i, p) in parts.iter().enumerate() {
        let part = format!("{i}/2");
        ok(&bale(
            &["pack", "--format", "h5", "--part", &part, "-o"],
            &[p, &input],
        ));
    }
    let merged = t.path().join("merged");
    ok(&bale(&["merge", "-o"], &[&merged, &parts[0], &parts[1]]));
    let m = Manifest::read(&merged).unwrap();
    assert_eq!(
        m.shards.iter().map(|s| s.file.as_str()).collect::<Vec<_>>(),
        ["shard-000000.h5", "shard-000001.h5"]
    );
    ok(&bale(&["verify"], &[&merged]));
    assert_eq!(samples(&merged), samples(&whole));
}

/// Writes `N` PNGs of 12x8 pixels (RGB, grey, palette and RGBA, so the
/// conversion to 8-bit RGB is exercised) in two class directories.
const WRITE_PNG_TREE: &str = r#"
import os, sys
import numpy as np
from PIL import Image
root, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
for i in range(n):
    d = os.path.join(root, ["cat", "dog"][i % 2])
    os.makedirs(d, exist_ok=True)
    px = rng.integers(0, 256, (8, 12, 3), dtype=np.uint8)
    img = Image.fromarray(px, "RGB")
    img = [img, img.convert("L"), img.convert("P"), img.convert("RGBA")][i % 4]
    img.save(os.path.join(d, f"{i:04d}.png"))
"#;

/// Compares `dense/npy` of every shard with Pillow's decoding of the
/// original PNGs, converted to RGB.
const DENSE_EQUALS_PILLOW: &str = r#"
import json, os, sys
import h5py, numpy as np
from PIL import Image
out, tree = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(out, "bale.json")))
n = 0
for s in m["shards"]:
    with h5py.File(os.path.join(out, s["file"]), "r") as f:
        d = f["dense/npy"]
        assert d.dtype == np.uint8 and d.shape[1:] == (8, 12, 3), d
        for i, k in enumerate(f["keys"].asstr()[:]):
            want = np.asarray(Image.open(os.path.join(tree, k + ".png")).convert("RGB"))
            assert np.array_equal(d[i], want), k
            n += 1
print(n)
"#;

#[test]
fn a_raw_packed_dataset_converts_to_h5_with_a_dense_array_of_the_decoded_images() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    run_python(WRITE_PNG_TREE, &[os(&input), OsStr::new("10")]).unwrap();
    let raw = t.path().join("raw");
    ok(&bale(
        &["pack", "--image-format", "raw", "--labels", "dir", "-o"],
        &[&raw, &input],
    ));
    let h5 = t.path().join("h5");
    ok(&bale(
        &["convert", "--format", "h5", "--shard-samples", "4"],
        &[&raw, Path::new("-o"), &h5],
    ));
    assert_eq!(Manifest::read(&h5).unwrap().shards.len(), 3);
    let printed = run_python(DENSE_EQUALS_PILLOW, &[os(&h5), os(&input)]).unwrap();
    assert_eq!(printed.trim(), "10");
    ok(&bale(&["verify"], &[&h5]));
}
