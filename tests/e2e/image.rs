//! The image stage of `bale pack` (issue 4) through the real binary: sizes
//! and `orig.json`, `.npy` read back by numpy and the Python `webdataset`
//! library, corrupt and oversized images under `--on-error`, determinism
//! across `--jobs`, and `bale verify` on the output.

use std::collections::BTreeMap;
use std::fs;
use std::io::Cursor;
use std::path::Path;

use bale_format::Manifest;
use bale_tests::run_python;
use bale_tests::{assert_success as ok, describe as text, run_bale as bale};
use image::{DynamicImage, ImageFormat};

/// A colourful RGB picture.
fn picture(w: u32, h: u32, seed: u32) -> DynamicImage {
    DynamicImage::ImageRgb8(image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([
            ((x * 255) / w + seed) as u8,
            ((y * 255) / h) as u8,
            ((x + y + seed * 7) % 256) as u8,
        ])
    }))
}

fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

/// Sizes of the images in [`tree`], by key.
const SIZES: &[(&str, u32, u32)] = &[
    ("cat/a", 300, 200),
    ("cat/b", 90, 120),
    ("cat/c", 257, 255),
    ("dog/d", 640, 480),
    ("dog/e", 31, 17),
    ("dog/f", 128, 512),
];

/// An ImageFolder tree: JPEGs of the sizes in [`SIZES`], a PNG mask beside
/// one, a user `.json` beside another.
fn tree(root: &Path) {
    for (i, (key, w, h)) in SIZES.iter().enumerate() {
        let p = root.join(format!("{key}.jpg"));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, encode(&picture(*w, *h, i as u32), ImageFormat::Jpeg)).unwrap();
    }
    fs::write(
        root.join("cat/a.seg.png"),
        encode(&picture(300, 200, 9), ImageFormat::Png),
    )
    .unwrap();
    fs::write(root.join("dog/d.json"), br#"{"caption": "a dog"}"#).unwrap();
}

type Samples = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// Every sample of a dataset by key, its members by extension.
fn samples(dir: &Path) -> Samples {
    crate::common::samples(dir)
        .into_iter()
        .map(|(key, members)| (key, members.into_iter().collect()))
        .collect()
}

fn dims(ext: &str, bytes: &[u8]) -> (u32, u32) {
    bale_image::decode_check(ext, bytes).unwrap()
}

fn orig(sample: &BTreeMap<String, Vec<u8>>) -> serde_json::Value {
    serde_json::from_slice(&sample["orig.json"]).unwrap()
}

#[test]
fn resize_modes_give_their_sizes_and_keep_original_sizes() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input);
    // (flags, expected stored size of a WxH image)
    type Rule = fn(u32, u32) -> (u32, u32);
    let shorter: Rule = |w, h| {
        let s = w.min(h);
        if s <= 64 {
            (w, h)
        } else if w <= h {
            (64, (h * 64 + w / 2) / w)
        } else {
            ((w * 64 + h / 2) / h, 64)
        }
    };
    let longer: Rule = |w, h| {
        let l = w.max(h);
        if l <= 100 {
            (w, h)
        } else if w >= h {
            (100, (h * 100 + w / 2) / w)
        } else {
            ((w * 100 + h / 2) / h, 100)
        }
    };
    let cases: [(&[&str], Rule); 2] = [
        (
            &["--resize", "shorter:64", "--image-format", "jpeg:85"],
            shorter,
        ),
        (&["--resize", "longer:100", "--image-format", "png"], longer),
    ];
    for (flags, rule) in cases {
        let out = t.path().join(flags[1].replace(':', "-"));
        let mut args = vec!["pack", "-q", "-o"];
        args.push(out.to_str().unwrap());
        args.extend_from_slice(flags);
        ok(&bale(&args, &[&input]));
        let s = samples(&out);
        let ext = if flags[3].starts_with("jpeg") {
            "jpg"
        } else {
            "png"
        };
        for (key, w, h) in SIZES {
            let sample = &s[*key];
            assert_eq!(dims(ext, &sample[ext]), rule(*w, *h), "{flags:?} {key}");
            assert_eq!(
                orig(sample)[ext],
                serde_json::json!({"width": w, "height": h}),
                "{key}"
            );
            assert!(!sample.contains_key("jpg") || ext == "jpg");
        }
        // The mask is an image too, the user's json is kept as it was.
        let a = &s["cat/a"];
        let mask_ext = if ext == "jpg" { "seg.jpg" } else { "seg.png" };
        assert_eq!(dims(mask_ext, &a[mask_ext]), rule(300, 200));
        assert_eq!(orig(a)[mask_ext]["width"], 300);
        assert_eq!(s["dog/d"]["json"], br#"{"caption": "a dog"}"#);
        let m = Manifest::read(&out).unwrap();
        let rec = m.image_transform().expect("image transform recorded");
        assert_eq!(rec.resize.as_deref(), Some(flags[1]));
        assert_eq!(rec.original_size, "orig.json");
        assert_eq!(m.fields["orig.json"].count, SIZES.len() as u64);
        let v = bale(&["verify", "--decode"], &[&out]);
        ok(&v);
    }
    // --upscale: small images grow; --image-exts jpg leaves the mask alone.
    let out = t.path().join("up");
    ok(&bale(
        &[
            "pack",
            "-q",
            "--resize",
            "fit:200x200",
            "--upscale",
            "--image-format",
            "jpeg",
            "--image-exts",
            "jpg",
            "-o",
        ],
        &[&out, &input],
    ));
    let s = samples(&out);
    assert_eq!(dims("jpg", &s["dog/e"]["jpg"]), (200, 110));
    assert_eq!(dims("jpg", &s["cat/b"]["jpg"]), (150, 200));
    assert_eq!(
        s["cat/a"]["seg.png"],
        encode(&picture(300, 200, 9), ImageFormat::Png),
        "not an image by --image-exts: untouched"
    );
    assert!(orig(&s["cat/a"]).get("seg.png").is_none());
}

#[test]
fn raw_npy_reads_back_in_numpy_and_webdataset() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    // Lossless sources, so the pixels can be compared exactly with Pillow's.
    let imgs = [
        ("k/0", picture(23, 11, 1)),
        (
            "k/1",
            DynamicImage::ImageLuma8(image::GrayImage::from_fn(5, 7, |x, y| {
                image::Luma([(x * 40 + y) as u8])
            })),
        ),
        (
            "k/2",
            DynamicImage::ImageRgba8(image::RgbaImage::from_fn(4, 3, |x, y| {
                image::Rgba([x as u8 * 60, y as u8 * 80, 5, 128])
            })),
        ),
    ];
    for (key, img) in &imgs {
        let p = input.join(format!("{key}.png"));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, encode(img, ImageFormat::Png)).unwrap();
    }
    let out = t.path().join("raw");
    ok(&bale(
        &[
            "pack",
            "-q",
            "--labels",
            "none",
            "--image-format",
            "raw",
            "-o",
        ],
        &[&out, &input],
    ));
    let s = samples(&out);
    assert!(s["k/0"].contains_key("npy") && !s["k/0"].contains_key("png"));
    let shard = out.join("shard-000000.tar");
    let script = r#"
import io, json, sys, tarfile
import numpy as np
import webdataset as wds
from PIL import Image
shard, src = sys.argv[1], sys.argv[2]
# numpy.load on the members as GNU tar would extract them.
with tarfile.open(shard) as tf:
    loaded = {m.name: np.load(io.BytesIO(tf.extractfile(m).read())) for m in tf if m.name.endswith(".npy")}
seen = 0
for sample in wds.WebDataset(shard, shardshuffle=False).decode():
    arr = sample["npy"]
    key = sample["__key__"]
    want = np.asarray(Image.open(f"{src}/{key}.png").convert("RGB"))
    assert isinstance(arr, np.ndarray), type(arr)
    assert arr.dtype == np.uint8 and arr.flags["C_CONTIGUOUS"], (arr.dtype, arr.flags)
    assert arr.shape == want.shape, (key, arr.shape, want.shape)
    assert (arr == want).all(), key
    assert (loaded[f"{key}.npy"] == arr).all()
    assert sample["orig.json"] == {"npy": {"width": want.shape[1], "height": want.shape[0]}}, sample["orig.json"]
    seen += 1
print(seen)
"#;
    let got = run_python(script, &[shard.as_os_str(), input.as_os_str()]).unwrap();
    assert_eq!(got.trim(), "3");
    // --mode keep: gray stays one channel, alpha stays.
    let keep = t.path().join("keep");
    ok(&bale(
        &[
            "pack",
            "-q",
            "--labels",
            "none",
            "--image-format",
            "raw",
            "--mode",
            "keep",
            "-o",
        ],
        &[&keep, &input],
    ));
    let script = r#"
import sys
import webdataset as wds
for s in wds.WebDataset(sys.argv[1], shardshuffle=False).decode():
    print(s["__key__"], s["npy"].shape, s["npy"].dtype)
"#;
    let shard = keep.join("shard-000000.tar");
    let got = run_python(script, &[shard.as_os_str()]).unwrap();
    assert_eq!(
        got,
        "k/0 (11, 23, 3) uint8\nk/1 (7, 5, 1) uint8\nk/2 (3, 4, 4) uint8\n"
    );
    ok(&bale(&["verify"], &[&keep]));
}

/// A PNG whose header claims `w` x `h` pixels.
fn png_bomb(w: u32, h: u32) -> Vec<u8> {
    let mut png = encode(&picture(1, 1, 0), ImageFormat::Png);
    // IHDR data starts at byte 16; its CRC covers bytes 12..29.
    png[16..20].copy_from_slice(&w.to_be_bytes());
    png[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&png[12..29]);
    png[29..33].copy_from_slice(&crc.to_be_bytes());
    png
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn corrupt_mislabelled_and_bomb_images_follow_on_error() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input);
    let good = encode(&picture(50, 40, 3), ImageFormat::Jpeg);
    fs::write(input.join("cat/trunc.jpg"), &good[..good.len() / 3]).unwrap();
    fs::write(
        input.join("cat/mislabelled.jpg"),
        encode(&picture(5, 5, 0), ImageFormat::Png),
    )
    .unwrap();
    fs::write(input.join("dog/bomb.png"), png_bomb(20_000, 20_000)).unwrap();
    fs::write(input.join("dog/bomb.txt"), b"a caption").unwrap();
    let out = t.path().join("fail");
    let flags = [
        "pack",
        "-q",
        "--resize",
        "shorter:32",
        "--image-format",
        "jpeg",
        "-o",
    ];
    let o = bale(&flags, &[&out, &input]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cat/mislabelled.jpg"), "{err}");
    assert!(!out.join("bale.json").exists(), "no dataset on failure");

    let out = t.path().join("skip");
    let mut args = flags[..flags.len() - 1].to_vec();
    args.extend(["--on-error", "skip", "--json", "-o"]);
    let o = bale(&args, &[&out, &input]);
    ok(&o);
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["samples"], SIZES.len() as u64);
    let skipped: BTreeMap<String, String> = summary["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let p = f["path"].as_str().unwrap();
            let rel = p.rsplit_once("/in/").unwrap().1.to_owned();
            (rel, f["error"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(
        skipped.keys().collect::<Vec<_>>(),
        [
            "cat/mislabelled.jpg",
            "cat/trunc.jpg",
            "dog/bomb.png",
            "dog/bomb.txt"
        ]
    );
    assert!(
        skipped["dog/bomb.png"]
            .contains("20000x20000 = 400000000 pixels, more than the limit of 178956970"),
        "{skipped:?}"
    );
    assert!(skipped["dog/bomb.txt"].contains("dropped"), "{skipped:?}");
    assert!(
        skipped["cat/trunc.jpg"].contains("does not decode"),
        "{skipped:?}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("skipped 4 files"), "{err}");
    assert_eq!(Manifest::read(&out).unwrap().skipped, 4);
    ok(&bale(&["verify", "--decode"], &[&out]));

    // The limit is configurable.
    let out = t.path().join("max");
    let o = bale(
        &[
            "pack",
            "-q",
            "--image-format",
            "raw",
            "--max-pixels",
            "100",
            "--include",
            "bomb.*",
            "-o",
        ],
        &[&out, &input],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("more than the limit of 100"),
        "{}",
        text(&o)
    );
}

#[test]
fn output_is_byte_identical_across_jobs() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input);
    for i in 0..40u32 {
        let p = input.join(format!("many/{i:03}.jpg"));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(
            p,
            encode(&picture(100 + i * 7, 80 + i * 3, i), ImageFormat::Jpeg),
        )
        .unwrap();
    }
    for format in ["jpeg:90", "raw"] {
        let mut outs = Vec::new();
        for jobs in ["1", "4"] {
            let out = t.path().join(format!("{}-{jobs}", format.replace(':', "")));
            ok(&bale(
                &[
                    "pack",
                    "-q",
                    "--resize",
                    "shorter:48",
                    "--image-format",
                    format,
                    "--shard-size",
                    "200kB",
                    "--jobs",
                    jobs,
                    "-o",
                ],
                &[&out, &input],
            ));
            let mut files = BTreeMap::new();
            for e in fs::read_dir(&out).unwrap().flatten() {
                files.insert(e.file_name(), fs::read(e.path()).unwrap());
            }
            outs.push(files);
        }
        assert!(outs[0].len() > 3, "several shards");
        assert_eq!(outs[0], outs[1], "{format}: --jobs 1 and 4 differ");
    }
}

#[test]
fn image_flags_are_checked() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input);
    let out = t.path().join("out");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--resize", "short:5"],
            "expected shorter:N, longer:N or fit:WxH",
        ),
        (&["--resize", "fit:0x5"], "width \"0\""),
        (&["--image-format", "jpeg:101"], "1..=100"),
        (
            &["--image-format", "gif"],
            "expected jpeg, jpeg:QUALITY, png, keep or raw",
        ),
        (&["--mode", "keep"], "hint: add --resize"),
        (&["--max-pixels", "5"], "only apply to the image stage"),
        (&["--upscale"], "--resize"),
        (
            &["--image-format", "raw", "--image-exts", "txt"],
            "names no format",
        ),
        (
            &["--image-format", "raw", "--max-pixels", "0"],
            "more than 0",
        ),
    ];
    for (flags, want) in cases {
        let mut args = vec!["pack", "-o", out.to_str().unwrap()];
        args.extend_from_slice(flags);
        let o = bale(&args, &[&input]);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{flags:?}: {err}");
        assert!(!out.join("bale.json").exists());
    }
    // Two images stored under one name (jpg and png both become npy).
    fs::write(
        input.join("dog/d.png"),
        encode(&picture(4, 4, 0), ImageFormat::Png),
    )
    .unwrap();
    let o = bale(
        &["pack", "-q", "--image-format", "raw", "-o"],
        &[&out, &input],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("dog/d.png") && err.contains("stored as .npy"),
        "{err}"
    );
    fs::remove_file(input.join("dog/d.png")).unwrap();
    // A user member named orig.json clashes with the stage's: an input error.
    fs::write(input.join("cat/a.orig.json"), b"{}").unwrap();
    let o = bale(
        &["pack", "-q", "--image-format", "png", "-o"],
        &[&out, &input],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cat/a.orig.json"),
        "{}",
        text(&o)
    );
}

/// torch's `interpolate(mode="nearest")` source index of output index `o`
/// (the special cases of the same size and twice it agree with the float
/// formula for these sizes).
fn torch_nearest(o: u32, n_in: u32, n_out: u32) -> u32 {
    ((o as f32 * (n_in as f32 / n_out as f32)).floor() as u32).min(n_in - 1)
}

/// A mask's values, row by row, as the loader reads them.
fn mask_values(ext: &str, bytes: &[u8]) -> (u32, u32, Vec<u16>) {
    let mut v = Vec::new();
    let info = bale_image::mask::MaskDecoder::default()
        .rows(ext, bytes, u64::MAX, u32::MAX, |_, r| {
            match r {
                bale_image::mask::MaskRow::U8(r) => v.extend(r.iter().map(|&x| u16::from(x))),
                bale_image::mask::MaskRow::U16(r) => v.extend_from_slice(r),
            }
            Ok(())
        })
        .unwrap();
    (info.width, info.height, v)
}

/// `src` (w x h) resized to `ow` x `oh` by torch's nearest rule.
fn nearest_of(src: &[u16], w: u32, h: u32, ow: u32, oh: u32) -> Vec<u16> {
    let mut out = Vec::new();
    for y in 0..oh {
        for x in 0..ow {
            out.push(src[(torch_nearest(y, h, oh) * w + torch_nearest(x, w, ow)) as usize]);
        }
    }
    out
}

/// `jpeg` with an EXIF APP1 segment after its SOI whose one tag is the
/// orientation `value` (big-endian TIFF, one IFD entry of type SHORT).
fn with_orientation(jpeg: &[u8], value: u8) -> Vec<u8> {
    assert_eq!(jpeg[..2], [0xFF, 0xD8], "a JPEG starts with SOI");
    let mut tiff = b"MM\x00\x2a\x00\x00\x00\x08".to_vec();
    tiff.extend([0x00, 0x01]); // one entry
    tiff.extend([0x01, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01]); // 0x0112, SHORT, 1
    tiff.extend([0x00, value, 0x00, 0x00]);
    tiff.extend([0x00; 4]); // no next IFD
    let mut app1 = b"Exif\x00\x00".to_vec();
    app1.extend(tiff);
    let len = u16::try_from(app1.len() + 2).unwrap();
    let mut out = jpeg[..2].to_vec();
    out.extend([0xFF, 0xE1]);
    out.extend(len.to_be_bytes());
    out.extend(app1);
    out.extend(&jpeg[2..]);
    out
}

#[test]
fn resize_takes_masks_with_their_image_nearest_and_refuses_what_it_cannot() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(&input).unwrap();
    let jpg = encode(&picture(64, 48, 1), ImageFormat::Jpeg);
    // A 64x48 palette mask of classes 0-2 (PIL's mode "P", 2-bit indices).
    let hex = "89504e470d0a1a0a0000000d4948445200000040000000300203000000dc25948c00000009504c5445000000ff000000ff00f483bf7e0000002449444154789c636460606060600d60606060086560606060624003a302a302a302300000b3e4010ab06ea9cc0000000049454e44ae426082";
    let palette: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    // Grey masks with a value per pixel (8 and 16 bits), and a uint8 .npy
    // of shape (H, W), all 64x48.
    let grey = image::GrayImage::from_fn(64, 48, |x, y| image::Luma([(x * 3 + y * 5) as u8]));
    let grey16 = image::ImageBuffer::<image::Luma<u16>, _>::from_fn(64, 48, |x, y| {
        image::Luma([(x * 997 + y) as u16])
    });
    let npy_vals: Vec<u8> = (0..64 * 48).map(|i| (i % 251) as u8).collect();
    let npy = bale_format::npy::encode_shape("|u1", &[48, 64], &npy_vals);
    fs::write(input.join("a.jpg"), &jpg).unwrap();
    fs::write(input.join("a.mask.png"), &palette).unwrap();
    fs::write(
        input.join("a.label.png"),
        encode(&DynamicImage::ImageLuma8(grey.clone()), ImageFormat::Png),
    )
    .unwrap();
    fs::write(
        input.join("a.depth.png"),
        encode(&DynamicImage::ImageLuma16(grey16.clone()), ImageFormat::Png),
    )
    .unwrap();
    fs::write(input.join("a.seg.npy"), &npy).unwrap();
    fs::write(input.join("a.cls"), "1").unwrap();
    let source: BTreeMap<&str, (u32, u32, Vec<u16>)> = [
        ("mask.png", mask_values("png", &palette)),
        (
            "label.png",
            (64, 48, grey.pixels().map(|p| u16::from(p.0[0])).collect()),
        ),
        (
            "depth.png",
            (64, 48, grey16.pixels().map(|p| p.0[0]).collect()),
        ),
        (
            "seg.npy",
            (64, 48, npy_vals.iter().map(|&v| u16::from(v)).collect()),
        ),
    ]
    .into();
    let out = t.path().join("out");
    for exts in [None, Some("jpg")] {
        // Named or not as images, masks move with the image.
        let mut args = vec!["pack", "-q", "--force", "--resize", "shorter:16"];
        args.extend(exts.iter().flat_map(|e| ["--image-exts", e]));
        args.push("-o");
        ok(&bale(&args, &[&out, &input]));
        let s = &samples(&out)["a"];
        assert_eq!(dims("jpg", &s["jpg"]), (21, 16));
        for (ext, (w, h, src)) in &source {
            let (mw, mh, got) = mask_values(ext, &s[*ext]);
            assert_eq!((mw, mh), (21, 16), "{ext}");
            assert_eq!(
                got,
                nearest_of(src, *w, *h, 21, 16),
                "{ext}: torch's nearest"
            );
        }
        assert_eq!(s["cls"], b"1");
        // The palette PNG stays one: PIL opens it as mode "P" with its colours.
        assert!(bale_image::mask::mask_info("png", &s["mask.png"]).is_ok());
        let pal = image::load_from_memory(&s["mask.png"]).unwrap().to_rgb8();
        let src = image::load_from_memory(&palette).unwrap().to_rgb8();
        let colours = |i: &image::RgbImage| {
            i.pixels()
                .map(|p| p.0)
                .collect::<std::collections::BTreeSet<_>>()
        };
        assert!(colours(&pal).is_subset(&colours(&src)));
    }
    // A format change alone leaves masks as they are: never a JPEG.
    ok(&bale(
        &["pack", "-q", "--force", "--image-format", "jpeg:60", "-o"],
        &[&out, &input],
    ));
    let s = &samples(&out)["a"];
    assert_ne!(s["jpg"], jpg);
    assert_eq!(s["mask.png"], palette);
    assert_eq!(s["seg.npy"], npy);
    // What may be a mask but no nearest resize keeps exact is refused,
    // naming the file, and so is a mask of an image with an EXIF
    // orientation (the resize turns the image upright, not the mask);
    // --on-error skip drops those samples alone.
    let bad = t.path().join("bad");
    fs::create_dir_all(&bad).unwrap();
    let gray_alpha = image::GrayAlphaImage::from_fn(64, 48, |x, _| image::LumaA([x as u8, 255]));
    for (key, image, ext, data, says) in [
        (
            "b",
            jpg.clone(),
            "mask.png",
            encode(&DynamicImage::ImageLumaA8(gray_alpha), ImageFormat::Png),
            "without alpha",
        ),
        (
            "c",
            jpg.clone(),
            "depth.npy",
            bale_format::npy::encode_shape("<f4", &[48, 64], &vec![0; 64 * 48 * 4]),
            "<f4",
        ),
        (
            "d",
            jpg.clone(),
            "mask.png",
            encode(
                &DynamicImage::ImageLuma8(image::GrayImage::new(32, 24)),
                ImageFormat::Png,
            ),
            "not the image's 64x48",
        ),
        (
            "f",
            with_orientation(&jpg, 3),
            "mask.png",
            palette.clone(),
            "EXIF orientation",
        ),
    ] {
        let one = t.path().join(format!("one-{key}"));
        let one_out = t.path().join(format!("out-{key}"));
        fs::create_dir_all(&one).unwrap();
        for dir in [&one, &bad] {
            fs::write(dir.join(format!("{key}.jpg")), &image).unwrap();
            fs::write(dir.join(format!("{key}.{ext}")), &data).unwrap();
        }
        let o = bale(
            &["pack", "-q", "--force", "--resize", "shorter:16", "-o"],
            &[&one_out, &one],
        );
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("{key}.{ext}"))
                && err.contains(says)
                && err.contains("without --resize"),
            "{err}"
        );
        assert!(!one_out.join("bale.json").exists(), "no dataset on failure");
    }
    let bad_out = t.path().join("bad-out");
    fs::write(bad.join("e.jpg"), &jpg).unwrap();
    fs::write(bad.join("e.mask.png"), &palette).unwrap();
    let o = bale(
        &[
            "pack",
            "-q",
            "--resize",
            "shorter:16",
            "--on-error",
            "skip",
            "-o",
        ],
        &[&bad_out, &bad],
    );
    ok(&o);
    let s = samples(&bad_out);
    assert_eq!(s.keys().collect::<Vec<_>>(), ["e"]);
    assert_eq!(mask_values("png", &s["e"]["mask.png"]).0, 21);
}
