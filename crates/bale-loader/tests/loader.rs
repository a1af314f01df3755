//! The loader through its public API, on datasets written here: every sample
//! once per epoch in each order, disjoint partitions, labels that belong to
//! their images, the same bytes whatever the thread count, exact resume,
//! damaged images failing or skipped, and masks and boxes following each
//! sample's geometry.

use std::collections::BTreeSet;
use std::path::Path;

use bale_format::{CreatedBy, Manifest, Member, ShardFileWriter};
use bale_loader::{Crop, Loader, LoaderError, LoaderOptions, OnError, Order, Resize, nearest};
use bale_reader::{Dataset, Partition};

const N: u32 = 45;

/// Image `i`: 40x30 pixels, every pixel `[i, label * 50, 7]`, so a crop of
/// it still says which sample and which label it came from.
fn png(i: u32) -> Vec<u8> {
    let label = i % 3;
    let img = image::RgbImage::from_pixel(40, 30, image::Rgb([i as u8, (label * 50) as u8, 7]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// `N` samples in shards of 10; sample `damaged` (if any) holds bytes that
/// are not a PNG.
fn write(dir: &Path, damaged: Option<u32>) {
    let mut shards = Vec::new();
    for s in 0..N.div_ceil(10) {
        let mut w = ShardFileWriter::create(
            dir,
            &format!("shard-{s:06}.tar"),
            bale_format::Compression::None,
            0,
        )
        .unwrap();
        for i in s * 10..((s + 1) * 10).min(N) {
            let cls = (i % 3).to_string();
            let data = if Some(i) == damaged {
                b"not a png at all".to_vec()
            } else {
                png(i)
            };
            w.writer()
                .write_sample(
                    &format!("{i:04}"),
                    &[
                        Member {
                            ext: "cls",
                            data: cls.as_bytes(),
                        },
                        Member {
                            ext: "png",
                            data: &data,
                        },
                    ],
                )
                .unwrap();
        }
        shards.push(w.finish().unwrap());
    }
    let created_by = CreatedBy {
        tool: "test".into(),
        version: "0".into(),
        command: "test".into(),
        options: Default::default(),
    };
    Manifest::new(shards, None, created_by).write(dir).unwrap();
}

fn options(order: Order) -> LoaderOptions {
    LoaderOptions {
        batch_size: 4,
        size: (8, 8),
        crop: Crop::RandomResized,
        flip: true,
        order,
        seed: 11,
        threads: 3,
        ..LoaderOptions::default()
    }
}

/// (indices, labels, images) of a whole epoch.
fn epoch(loader: &Loader, epoch: u64, start: u64) -> (Vec<u64>, Vec<i64>, Vec<u8>) {
    let (mut idx, mut labels, mut pixels) = (Vec::new(), Vec::new(), Vec::new());
    for b in loader.epoch_from(epoch, start).unwrap() {
        let b = b.unwrap();
        assert!(b.skipped.is_empty());
        idx.extend(&b.indices);
        labels.extend(b.class_labels().unwrap());
        pixels.extend_from_slice(b.images.as_u8().unwrap());
    }
    (idx, labels, pixels)
}

#[test]
fn every_sample_once_per_epoch_in_each_order_with_its_own_label_and_pixels() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), None);
    for order in [Order::Sequential, Order::Shuffled, Order::ShardShuffled(8)] {
        let loader = Loader::new(Dataset::open(dir.path()).unwrap(), options(order)).unwrap();
        let (idx, labels, pixels) = epoch(&loader, 0, 0);
        let set: BTreeSet<u64> = idx.iter().copied().collect();
        assert_eq!(idx.len(), N as usize, "{order:?}");
        assert_eq!(set, (0..u64::from(N)).collect(), "{order:?}");
        for (k, (&i, &label)) in idx.iter().zip(&labels).enumerate() {
            assert_eq!(label, (i % 3) as i64, "{order:?}: sample {i}");
            // Every pixel of a flat image survives crop, resize and flip.
            let img = &pixels[k * 8 * 8 * 3..(k + 1) * 8 * 8 * 3];
            for px in img.chunks(3) {
                assert_eq!(
                    px,
                    [i as u8, (label * 50) as u8, 7],
                    "{order:?}: sample {i}"
                );
            }
        }
        if !matches!(order, Order::Sequential) {
            assert_ne!(idx, (0..u64::from(N)).collect::<Vec<_>>(), "{order:?}");
            let (again, _, _) = epoch(&loader, 1, 0);
            assert_ne!(idx, again, "{order:?}: epoch 1 has its own order");
        }
    }
}

#[test]
fn partitions_are_disjoint_and_cover_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), None);
    let mut all = Vec::new();
    for rank in 0..3 {
        let mut o = options(Order::Shuffled);
        o.partition = Partition::new(rank, 3);
        let loader = Loader::new(Dataset::open(dir.path()).unwrap(), o).unwrap();
        let (idx, _, _) = epoch(&loader, 2, 0);
        all.extend(idx);
    }
    all.sort_unstable();
    assert_eq!(all, (0..u64::from(N)).collect::<Vec<_>>());
}

#[test]
fn the_same_bytes_whatever_the_threads_and_an_exact_resume() {
    let dir = tempfile::tempdir().unwrap();
    // Images with texture, so crops and flips show in the bytes.
    let mut shards = Vec::new();
    let mut w = ShardFileWriter::create(
        dir.path(),
        "shard-000000.tar",
        bale_format::Compression::None,
        0,
    )
    .unwrap();
    for i in 0..24u32 {
        let img = image::RgbImage::from_fn(64, 48, |x, y| {
            image::Rgb([(x * 4) as u8, (y * 5) as u8, ((x * y + i) % 251) as u8])
        });
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        w.writer()
            .write_sample(
                &format!("{i:04}"),
                &[Member {
                    ext: "png",
                    data: out.get_ref(),
                }],
            )
            .unwrap();
    }
    shards.push(w.finish().unwrap());
    let created_by = CreatedBy {
        tool: "test".into(),
        version: "0".into(),
        command: "test".into(),
        options: Default::default(),
    };
    Manifest::new(shards, None, created_by)
        .write(dir.path())
        .unwrap();

    let run = |threads: usize, start: u64| {
        let mut o = options(Order::Shuffled);
        o.size = (16, 16);
        o.threads = threads;
        let loader = Loader::new(Dataset::open(dir.path()).unwrap(), o).unwrap();
        epoch(&loader, 3, start)
    };
    let one = run(1, 0);
    let four = run(4, 0);
    assert_eq!(one, four, "the thread count changed the batches");
    assert!(one.1.iter().all(|&l| l == -1), "no .cls: label -1");
    // Resumed after 2 batches: the rest of the same epoch, byte for byte.
    let resumed = run(2, 8);
    assert_eq!(resumed.0, one.0[8..]);
    assert_eq!(resumed.2, one.2[8 * 16 * 16 * 3..]);
    // Another seed: other crops.
    let mut o = options(Order::Shuffled);
    o.size = (16, 16);
    o.seed = 12;
    let other = epoch(
        &Loader::new(Dataset::open(dir.path()).unwrap(), o).unwrap(),
        3,
        0,
    );
    assert_ne!(other.2, one.2);
}

#[test]
fn a_damaged_image_fails_naming_the_sample_or_is_skipped_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), Some(13));
    let loader = Loader::new(
        Dataset::open(dir.path()).unwrap(),
        options(Order::Sequential),
    )
    .unwrap();
    let err = loader
        .epoch(0)
        .unwrap()
        .find_map(|b| b.err())
        .expect("the damaged sample should fail the epoch");
    assert!(err.to_string().contains("0013"), "{err}");

    let mut o = options(Order::Sequential);
    o.on_error = OnError::Skip;
    let loader = Loader::new(Dataset::open(dir.path()).unwrap(), o).unwrap();
    let mut seen = Vec::new();
    let mut skipped = Vec::new();
    for b in loader.epoch(0).unwrap() {
        let b = b.unwrap();
        assert_eq!(b.images.shape()[0], b.len());
        seen.extend(b.indices);
        skipped.extend(b.skipped);
    }
    assert_eq!(skipped.len(), 1);
    assert_eq!((skipped[0].index, skipped[0].key.as_str()), (13, "0013"));
    assert!(!seen.contains(&13));
    assert_eq!(seen.len(), N as usize - 1);
}

/// A sample of a 40x30 PNG, a mask whose value is each pixel's column
/// (`x % 200`) and boxes in JSON.
fn write_targets(dir: &Path, bad_mask: Option<u32>) {
    let mut w = ShardFileWriter::create(dir, "shard-000000.tar", bale_format::Compression::None, 0)
        .unwrap();
    for i in 0..12u32 {
        let img = image::RgbImage::from_fn(40, 30, |x, y| {
            image::Rgb([x as u8 * 6, y as u8 * 8, i as u8])
        });
        let mut png = std::io::Cursor::new(Vec::new());
        img.write_to(&mut png, image::ImageFormat::Png).unwrap();
        let (mw, mh) = if Some(i) == bad_mask {
            (20, 30)
        } else {
            (40, 30)
        };
        let mask =
            image::GrayImage::from_fn(mw, mh, |x, y| image::Luma([(x + 40 * (y % 5)) as u8]));
        let mut mpng = std::io::Cursor::new(Vec::new());
        mask.write_to(&mut mpng, image::ImageFormat::Png).unwrap();
        let boxes = format!(
            r#"{{"boxes": [[0, 0, 40, 30], [{}, 2, {}, 12], [39, 29, 40, 30]], "labels": [1, 2, 3]}}"#,
            i,
            i + 10
        );
        w.writer()
            .write_sample(
                &format!("{i:04}"),
                &[
                    Member {
                        ext: "json",
                        data: boxes.as_bytes(),
                    },
                    Member {
                        ext: "mask.png",
                        data: mpng.get_ref(),
                    },
                    Member {
                        ext: "png",
                        data: png.get_ref(),
                    },
                ],
            )
            .unwrap();
    }
    let created_by = CreatedBy {
        tool: "test".into(),
        version: "0".into(),
        command: "test".into(),
        options: Default::default(),
    };
    Manifest::new(vec![w.finish().unwrap()], None, created_by)
        .write(dir)
        .unwrap();
}

#[test]
fn masks_and_boxes_follow_each_samples_geometry() {
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), None);
    let opts = LoaderOptions {
        batch_size: 5,
        size: (24, 32),
        resize: Resize::Random { min: 15, max: 45 },
        crop: Crop::Random,
        flip: true,
        vflip: true,
        masks: vec!["mask.png".into()],
        boxes: Some("json".into()),
        max_boxes: 3,
        order: Order::Shuffled,
        seed: 4,
        threads: 2,
        ..LoaderOptions::default()
    };
    let loader = Loader::new(Dataset::open(dir.path()).unwrap(), opts.clone()).unwrap();
    let (mut seen, mut padded, mut dropped) = (0, 0, 0);
    for batch in loader.epoch(1).unwrap() {
        let b = batch.unwrap();
        let masks = b.masks[0].1.as_u8().unwrap();
        let boxes = b.boxes.as_ref().unwrap();
        let (coords, counts) = (
            boxes.coords.as_f32().unwrap(),
            boxes.counts.as_i64().unwrap(),
        );
        for (k, &index) in b.indices.iter().enumerate() {
            let p = loader.sample_params(1, index).unwrap();
            padded += usize::from(!p.padding().is_empty());
            // Each output pixel holds its source pixel's value, or the fill.
            let (sw, sh) = p.scaled;
            for oy in 0..24u32 {
                for ox in 0..32u32 {
                    // The crop is taken from the flipped scaled image.
                    assert!(p.flip_first);
                    let (cx, cy) = (p.crop.left + i64::from(ox), p.crop.top + i64::from(oy));
                    let want = if cx < i64::from(sw) && cy < i64::from(sh) {
                        let fx = if p.flip { i64::from(sw) - 1 - cx } else { cx };
                        let fy = if p.vflip { i64::from(sh) - 1 - cy } else { cy };
                        let (x, y) = (nearest(fx as u32, 40, sw), nearest(fy as u32, 30, sh));
                        (x + 40 * (y % 5)) as u8
                    } else {
                        255
                    };
                    let got = masks[k * 24 * 32 + (oy * 32 + ox) as usize];
                    assert_eq!(got, want, "sample {index} at ({ox}, {oy}): {p:?}");
                }
            }
            // The whole-image box becomes the part of the output the image covers.
            let n = counts[k] as usize;
            let first = &coords[k * 12..k * 12 + 4];
            let (iw, ih) = ((sw.min(32)) as f32, (sh.min(24)) as f32);
            // Flipped or not, the padding is on the right and bottom.
            let (x1, x2) = (0.0, iw);
            let (y1, y2) = (0.0, ih);
            assert!(n >= 1, "{p:?}");
            for (g, w) in first.iter().zip([x1, y1, x2, y2]) {
                assert!(
                    (g - w).abs() < 0.5,
                    "{first:?} vs {:?}: {p:?}",
                    [x1, y1, x2, y2]
                );
            }
            dropped += 3 - n;
            assert!(
                coords[k * 12 + n * 4..(k + 1) * 12]
                    .iter()
                    .all(|&v| v == 0.0)
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 12);
    assert!(padded > 0 && dropped > 0, "{padded} {dropped}");
}

#[test]
fn a_mask_of_another_size_is_a_damaged_sample() {
    let dir = tempfile::tempdir().unwrap();
    write_targets(dir.path(), Some(7));
    let mut opts = LoaderOptions {
        batch_size: 4,
        size: (8, 8),
        crop: Crop::Resize,
        masks: vec!["mask.png".into()],
        ..LoaderOptions::default()
    };
    let loader = Loader::new(Dataset::open(dir.path()).unwrap(), opts.clone()).unwrap();
    let err = loader.epoch(0).unwrap().find_map(|b| b.err()).unwrap();
    assert!(matches!(err, LoaderError::Target { index: 7, .. }), "{err}");
    assert!(err.to_string().contains("20x30"), "{err}");
    opts.on_error = OnError::Skip;
    let loader = Loader::new(Dataset::open(dir.path()).unwrap(), opts).unwrap();
    let mut kept = Vec::new();
    for b in loader.epoch(0).unwrap() {
        let b = b.unwrap();
        assert_eq!(b.masks[0].1.shape(), [b.len(), 8, 8]);
        assert_eq!(b.images.shape()[0], b.len());
        kept.extend(b.indices);
        assert!(b.skipped.iter().all(|s| s.index == 7));
    }
    assert_eq!(kept, [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]);
}
