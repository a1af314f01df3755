//! `bale bench` (issue 10) on a small tree and its packed dataset, with a tiny
//! budget: the JSON fields are there and plausible (no timing is asserted),
//! every byte counted belongs to the samples counted, `--plot` writes a valid
//! SVG and PNG, and a missing path is an error.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::verify::{PNG, bale, text};

const SAMPLES: usize = 30;
const CAPTION: usize = 100;
/// Every sample: the PNG and a caption of fixed length, so the bytes of any
/// `k` samples are `k * SAMPLE_BYTES` whichever `k` a budget allows.
const SAMPLE_BYTES: u64 = PNG.len() as u64 + CAPTION as u64;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A tree of `SAMPLES` samples in 3 class directories, and its dataset (no labels).
fn tree_and_dataset(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let tree = dir.join("tree");
    for i in 0..SAMPLES {
        let class = tree.join(format!("class_{}", i % 3));
        std::fs::create_dir_all(&class).unwrap();
        std::fs::write(class.join(format!("{i:04}.png")), PNG).unwrap();
        let caption: String = format!("caption {i} ")
            .chars()
            .cycle()
            .take(CAPTION)
            .collect();
        std::fs::write(class.join(format!("{i:04}.txt")), caption).unwrap();
    }
    // Packing skips hidden files; so does bench.
    std::fs::write(tree.join(".hidden.txt"), b"not a sample").unwrap();
    let ds = dir.join("ds");
    let out = bale(&[
        "pack",
        s(&tree),
        "-o",
        s(&ds),
        "--labels",
        "none",
        "--shard-samples",
        "8",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (tree, ds)
}

fn bench_json(args: &[&str]) -> Value {
    let mut all = vec!["bench", "--json", "--budget", "0.3", "--threads", "2"];
    all.extend_from_slice(args);
    let out = bale(&all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

/// Each run: samples > 0, bytes = samples x SAMPLE_BYTES, rates consistent with them.
fn check_runs(src: &Value, kind: &str) {
    assert_eq!(src["kind"], kind);
    assert_eq!(src["samples"], SAMPLES as u64);
    assert!(src["bytes"].as_u64().unwrap() > 0);
    let runs = src["runs"].as_array().unwrap();
    // sequential and random x 2 threads and 1 x warm and cold.
    assert_eq!(runs.len(), 8, "{src}");
    let mut seen = BTreeSet::new();
    for r in runs {
        assert_eq!(
            keys(r),
            BTreeSet::from([
                "order",
                "cache",
                "threads",
                "samples",
                "bytes",
                "secs",
                "samples_per_sec",
                "mb_per_sec",
                "open_secs"
            ])
        );
        let n = r["samples"].as_u64().unwrap();
        assert!(n > 0 && n <= SAMPLES as u64, "{r}");
        assert_eq!(r["bytes"].as_u64().unwrap(), n * SAMPLE_BYTES, "{r}");
        let secs = r["secs"].as_f64().unwrap();
        assert!(secs > 0.0, "{r}");
        let sps = r["samples_per_sec"].as_f64().unwrap();
        assert!((sps - n as f64 / secs).abs() <= 1e-6 * sps.max(1.0), "{r}");
        let mbps = r["mb_per_sec"].as_f64().unwrap();
        assert!((mbps - (n * SAMPLE_BYTES) as f64 / 1e6 / secs).abs() < 1e-9 + 1e-6 * mbps);
        // A cold dataset figure reports the reopen time; a tree has none.
        let cold_dataset = kind == "dataset" && r["cache"] == "cold";
        assert_eq!(r["open_secs"].is_f64(), cold_dataset, "{r}");
        seen.insert((
            r["order"].as_str().unwrap().to_owned(),
            r["cache"].as_str().unwrap().to_owned(),
            r["threads"].as_u64().unwrap(),
        ));
    }
    assert_eq!(seen.len(), 8, "every (order, cache, threads) once");
    let d = &src["diagnosis"];
    assert!(
        [
            "opens_and_seeks",
            "disk_bandwidth",
            "decode_cpu",
            "read_cpu"
        ]
        .contains(&d["bound"].as_str().unwrap()),
        "{d}"
    );
    assert!(d["line"].as_str().unwrap().starts_with("bound by "), "{d}");
    assert!(d["storage_samples_per_sec"].as_f64().unwrap() > 0.0);
}

#[test]
fn tree_and_dataset_side_by_side_with_decode_and_target() {
    let tmp = tempfile::tempdir().unwrap();
    let (tree, ds) = tree_and_dataset(tmp.path());
    let v = bench_json(&[s(&tree), "--compare", s(&ds), "--decode", "--target", "1"]);
    assert_eq!(
        keys(&v),
        BTreeSet::from([
            "schema",
            "budget_secs",
            "threads",
            "seed",
            "decode",
            "target",
            "elapsed_secs",
            "sources"
        ])
    );
    assert_eq!(v["schema"], 1);
    assert_eq!(v["threads"], 2);
    assert_eq!(v["budget_secs"], 0.3);
    let sources = v["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2);
    assert_eq!(sources[0]["files"], 2 * SAMPLES as u64);
    assert_eq!(sources[0]["bytes"], SAMPLES as u64 * SAMPLE_BYTES);
    assert_eq!(sources[1]["files"], 4, "30 samples in shards of 8");
    check_runs(&sources[0], "tree");
    check_runs(&sources[1], "dataset");
    for src in sources {
        let d = &src["decode"];
        let runs = d["runs"].as_array().unwrap();
        assert_eq!(
            runs.iter()
                .map(|r| r["threads"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [1, 2]
        );
        let samples: u64 = runs.iter().map(|r| r["samples"].as_u64().unwrap()).sum();
        assert!(samples > 0);
        // One PNG per sample, and the caption is not an image.
        assert_eq!(d["images"].as_u64().unwrap(), samples, "{d}");
        assert_eq!(d["errors"], 0);
        assert!(d["secs_per_sample"].as_f64().unwrap() > 0.0);
        // A target of 1 sample/s is met with one worker.
        let t = &src["diagnosis"]["target"];
        assert_eq!(t["samples_per_sec"], 1.0);
        assert_eq!(t["keeps_up"], true, "{t}");
        assert_eq!(t["workers"], 1);
        assert_eq!(t["storage_limited"], false);
    }
}

#[test]
fn text_report_and_plots() {
    let tmp = tempfile::tempdir().unwrap();
    let (tree, ds) = tree_and_dataset(tmp.path());
    let svg = tmp.path().join("bench.svg");
    let png = tmp.path().join("bench.png");
    let out = bale(&[
        "bench",
        s(&tree),
        "--compare",
        s(&ds),
        "--budget",
        "0.2",
        "--threads",
        "2",
        "--plot",
        s(&svg),
        "--plot",
        s(&png),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.contains("tree "), "{t}");
    assert!(t.contains("random     cold"), "{t}");
    assert!(t.contains("diagnosis: bound by"), "{t}");
    assert!(t.contains("samples/s, 2 threads"), "{t}");
    // The SVG: one <svg> root with its size, bars, and the labels as text.
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(doc.starts_with("<svg"), "{}", &doc[..doc.len().min(200)]);
    assert!(doc.trim_end().ends_with("</svg>"));
    assert!(doc.contains("width=\"1000\"") && doc.contains("height=\"560\""));
    assert!(
        doc.matches("<rect").count() >= 16,
        "bars for 4 groups x 2 sources x 2 panels"
    );
    for label in [
        "random cold",
        "seq. warm",
        "tree (loose)",
        "ds (shards)",
        "samples/s",
    ] {
        assert!(doc.contains(label), "{label} missing from the SVG");
    }
    assert_eq!(doc.matches("<svg").count(), 1);
    // The PNG: signature, IHDR with the size, RGB 8-bit.
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((w, h), (1000, 560));
    assert_eq!((bytes[24], bytes[25]), (8, 2), "8-bit RGB");
    assert!(bytes.ends_with(b"IEND\xae\x42\x60\x82"));
}

#[test]
fn missing_path_and_bad_plot_name_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let out = bale(&["bench", s(&missing), "--budget", "0.1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("cannot open") && err.contains("nope"), "{err}");
    // A bad --compare fails before anything is measured.
    let out = bale(&["bench", s(tmp.path()), "--compare", s(&missing)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("nope"));
    let out = bale(&["bench", s(tmp.path()), "--plot", "x.jpg"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(".svg or .png"));
    let out = bale(&["bench", s(tmp.path()), "--budget", "0"]);
    assert_eq!(out.status.code(), Some(2));
    // A directory without a bale.json but an incomplete dataset's files is a
    // tree; an empty one measures nothing and says so.
    let v = bench_json(&[s(tmp.path())]);
    let src = &v["sources"][0];
    assert_eq!(src["samples"], 0);
    assert!(
        src["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["samples"] == 0)
    );
    assert_eq!(src["diagnosis"]["bound"], "unknown");
}

#[test]
fn decode_with_resize_decodes_every_image_and_needs_decode() {
    let tmp = tempfile::tempdir().unwrap();
    let (_tree, ds) = tree_and_dataset(tmp.path());
    let v = bench_json(&[s(&ds), "--decode", "--resize", "shorter:4"]);
    let d = &v["sources"][0]["decode"];
    let samples: u64 = d["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["samples"].as_u64().unwrap())
        .sum();
    assert!(samples > 0, "{d}");
    assert_eq!(d["images"].as_u64().unwrap(), samples, "{d}");
    assert_eq!(d["errors"], 0, "{d}");
    // --resize alone would measure nothing it names: refused.
    let out = bale(&["bench", s(&ds), "--resize", "shorter:4"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--decode"),
        "{}",
        text(&out.stderr)
    );
    // A malformed spec is refused by the parser, naming it.
    let out = bale(&["bench", s(&ds), "--decode", "--resize", "shorter"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("shorter"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn plot_never_replaces_a_file_unless_forced_nor_writes_through_a_symlink_or_into_its_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let (tree, _ds) = tree_and_dataset(tmp.path());
    let run = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            s(&tree),
            "--budget",
            "0.05",
            "--threads",
            "1",
            "-q",
        ];
        args.extend_from_slice(extra);
        bale(&args)
    };
    // An existing file: refused before anything is measured, kept as it was.
    let mine = tmp.path().join("thesis.png");
    std::fs::write(&mine, b"my thesis plot").unwrap();
    let out = run(&["--plot", s(&mine)]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    assert!(out.stdout.is_empty(), "measured before refusing");
    assert_eq!(std::fs::read(&mine).unwrap(), b"my thesis plot");
    // A symlink to it: --force replaces the link, never the file it names.
    let link = tmp.path().join("results.png");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    assert_eq!(run(&["--plot", s(&link)]).status.code(), Some(2));
    let out = run(&["--plot", s(&link), "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&mine).unwrap(), b"my thesis plot");
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.is_file(), "the link was replaced by the plot");
    assert_eq!(&std::fs::read(&link).unwrap()[..4], b"\x89PNG");
    // A file of the tree being measured: refused even with --force, and so
    // is a new file there.
    let first = std::fs::read_dir(&tree)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_file())
        .unwrap();
    let inside = first.with_extension("svg");
    std::fs::copy(&first, &inside).unwrap();
    let before = std::fs::read(&inside).unwrap();
    for target in [&inside, &tree.join("new.svg")] {
        let out = run(&["--plot", s(target), "--force"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("which this run measures"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(std::fs::read(&inside).unwrap(), before);
    assert!(!tree.join("new.svg").exists());
    // One file named twice: refused before measuring.
    let twice = tmp.path().join("twice.svg");
    let again = tmp.path().join(".").join("twice.svg");
    let out = run(&["--plot", s(&twice), "--plot", s(&again)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("given twice"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty() && !twice.exists());
}

/// A budget too large for a deadline is refused by name, not a panic
/// converting it ("cannot convert float seconds to Duration").
#[test]
fn a_budget_past_a_day_is_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    crate::common::text_tree(&input, "a", "b", 3);
    let ds = t.path().join("ds");
    bale_tests::assert_success(&bale_tests::run_bale(&["pack", "-q", "-o"], &[&ds, &input]));
    for budget in ["1e30", "86401"] {
        let o = bale_tests::run_bale(&["bench", "--budget", budget], &[&ds]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--budget") && err.contains("at most 86400"),
            "{err}"
        );
    }
}
