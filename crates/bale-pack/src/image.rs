//! The image stage as a sample transform: `bale-image` applied to the image
//! members of each sample, plus the `orig.json` member with original sizes.

use std::collections::BTreeMap;
use std::sync::Arc;

use bale_format::{ImageTransform, ORIGINAL_SIZE_EXT};
use bale_image::ImageOptions;

use crate::error::SampleTransformError;
use crate::hooks::{MemberData, SampleTransformFn};

/// The manifest record of the image options.
pub(crate) fn record(o: &ImageOptions) -> ImageTransform {
    ImageTransform {
        resize: o.resize.map(|r| r.to_string()),
        upscale: o.upscale,
        format: o.format.name().to_owned(),
        quality: o.format.quality(),
        mode: o.mode.name().to_owned(),
        max_pixels: o.max_pixels,
        exts: o.exts.clone(),
        filter: "lanczos3".to_owned(),
        original_size: ORIGINAL_SIZE_EXT.to_owned(),
    }
}

fn fail(ext: &str, e: impl std::error::Error + Send + Sync + 'static) -> SampleTransformError {
    SampleTransformError {
        ext: Some(ext.to_owned()),
        source: Box::new(e),
    }
}

/// Transforms the image members of one sample, and resizes the masks of
/// its image with it (see [`Target`]).
fn apply(
    opts: &ImageOptions,
    members: Vec<MemberData>,
) -> Result<Vec<MemberData>, SampleTransformError> {
    if !members.iter().any(|m| opts.is_image(&m.ext)) {
        return Ok(members);
    }
    if members.iter().any(|m| m.ext == ORIGINAL_SIZE_EXT) {
        return Err(SampleTransformError {
            ext: Some(ORIGINAL_SIZE_EXT.to_owned()),
            source: format!(
                "the sample already has a .{ORIGINAL_SIZE_EXT} member, which the image stage writes (original image sizes); rename it"
            )
            .into(),
        });
    }
    // The image the loader takes (the first of IMAGE_MEMBERS the sample
    // has), when the stage transforms it; what each other member is to it.
    let image = IMAGE_MEMBERS
        .iter()
        .find_map(|c| members.iter().position(|m| m.ext.eq_ignore_ascii_case(c)))
        .filter(|&i| opts.is_image(&members[i].ext));
    let mut targets = vec![Target::Other; members.len()];
    let mut image_size = None;
    if let Some(i) = image {
        let m = &members[i];
        let size = bale_image::region::dimensions(&m.ext, &m.data).map_err(|e| fail(&m.ext, e))?;
        for (j, o) in members.iter().enumerate() {
            if j != i {
                targets[j] = target(opts, &m.ext, size, o)?;
            }
        }
        image_size = Some(size);
    }
    let mut sizes: BTreeMap<String, BTreeMap<&str, u32>> = BTreeMap::new();
    let mut out: Vec<MemberData> = Vec::with_capacity(members.len() + 1);
    // The image first: its size is the masks'.
    let mut members: Vec<Option<MemberData>> = members.into_iter().map(Some).collect();
    let order = image
        .into_iter()
        .chain((0..members.len()).filter(|&j| Some(j) != image));
    let mut mask_size: Option<(u32, u32)> = None;
    for j in order {
        let m = members[j].take().expect("each member once");
        if targets[j] == Target::Mask {
            let size = image_size.expect("a mask has an image");
            let to = mask_size.expect("the image is transformed before its masks");
            let data = if to == size {
                m.data
            } else {
                bale_image::mask::resize_nearest(&m.ext, &m.data, opts.max_pixels, to.0, to.1)
                    .map_err(|e| fail(&m.ext, e))?
            };
            out.push(MemberData { ext: m.ext, data });
            continue;
        }
        if !opts.is_image(&m.ext) {
            out.push(m);
            continue;
        }
        let ext = m.ext.clone();
        let t = bale_image::transform(opts, &m.ext, m.data).map_err(|e| fail(&ext, e))?;
        if Some(j) == image {
            if t.oriented
                && let Some(k) = targets.iter().position(|t| *t == Target::Mask)
            {
                return Err(SampleTransformError {
                    ext: members[k].as_ref().map(|o| o.ext.clone()),
                    source: format!(
                        "a mask of the image .{ext}, which has an EXIF orientation that --resize applies: the mask would no longer line up with it; pack without --resize, or store the image upright"
                    )
                    .into(),
                });
            }
            mask_size = Some((t.out_width, t.out_height));
        }
        if let Some(other) = out
            .iter()
            .chain(members.iter().flatten())
            .find(|o| o.ext == t.ext)
        {
            return Err(SampleTransformError {
                ext: Some(ext),
                source: format!(
                    "the image would be stored as .{}, a member the sample already has; choose the images with --image-exts",
                    other.ext
                )
                .into(),
            });
        }
        sizes.insert(
            t.ext.clone(),
            BTreeMap::from([("height", t.height), ("width", t.width)]),
        );
        out.push(MemberData {
            ext: t.ext,
            data: t.data,
        });
    }
    let json = serde_json::to_vec(&sizes).map_err(|e| fail(ORIGINAL_SIZE_EXT, e))?;
    out.push(MemberData {
        ext: ORIGINAL_SIZE_EXT.to_owned(),
        data: json,
    });
    Ok(out)
}

/// The image members the loader takes a sample's image from, by default,
/// matched regardless of case.
const IMAGE_MEMBERS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// What a member is to the sample's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A mask of the image: a grey or palette PNG, or a C-order `uint8` or
    /// `uint16` `.npy` of shape `(H, W)` or `(H, W, 1)`, of the image's
    /// size. It is resized with the image, nearest-neighbour, and keeps its
    /// format (never JPEG).
    Mask,
    /// Anything else: an image member is transformed as an image, the rest
    /// is stored as it is.
    Other,
}

/// The width and height of a PNG from its IHDR, and its colour type, if
/// `data` begins like one.
fn png_header(data: &[u8]) -> Option<((u32, u32), u8)> {
    if data.len() <= 25 || !data.starts_with(b"\x89PNG\r\n\x1a\n") || &data[12..16] != b"IHDR" {
        return None;
    }
    let be = |at: usize| u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    Some(((be(16), be(20)), data[25]))
}

fn is_npy(ext: &str) -> bool {
    ext.rsplit('.')
        .next()
        .is_some_and(|e| e.eq_ignore_ascii_case("npy"))
}

/// What member `m` is to the image `.image` of `size` (width, height, as
/// stored and as the loader reads it), or why the stage cannot resize the
/// sample: a member that may be a mask of the image but that no
/// nearest-neighbour resize keeps exact, or one Lanczos would resample.
fn target(
    opts: &ImageOptions,
    image: &str,
    size: (u32, u32),
    m: &MemberData,
) -> Result<Target, SampleTransformError> {
    let refuse = |what: String, how: &str| {
        Err(SampleTransformError {
            ext: Some(m.ext.clone()),
            source: format!("{what} beside the image .{image}: {how}").into(),
        })
    };
    let (w, h) = size;
    if let Some(((mw, mh), colour)) = png_header(&m.data) {
        return match colour {
            // Grey or palette: a mask when of the image's size.
            0 | 3 if (mw, mh) == size => Ok(Target::Mask),
            0 | 3 if opts.is_image(&m.ext) => refuse(
                format!("a one-channel PNG (a mask?) of {mw}x{mh}, not the image's {w}x{h},"),
                "--resize would resample it and invent values it does not hold; pack without --resize (bale.Loader scales masks with their image, and refuses a mask of another size)",
            ),
            // Grey with alpha: no mask the loader reads, and Lanczos would
            // resample it.
            4 if (mw, mh) == size || opts.is_image(&m.ext) => refuse(
                format!("a grey+alpha PNG (a mask with alpha?) of {mw}x{mh}"),
                "--resize resizes only grey or palette masks, exactly; save it without alpha (a grey or palette PNG), or pack without --resize",
            ),
            _ => Ok(Target::Other),
        };
    }
    if !is_npy(&m.ext) {
        return Ok(Target::Other);
    }
    let Ok(bale_format::npy::Header::Simple {
        descr,
        fortran_order,
        shape,
        ..
    }) = bale_format::npy::parse(&m.data)
    else {
        return Ok(Target::Other);
    };
    let hw = [u64::from(h), u64::from(w)];
    let covers = shape.len() >= 2 && (shape[..2] == hw || shape[shape.len() - 2..] == hw);
    if !covers {
        return Ok(Target::Other);
    }
    let mask_dtype = matches!(descr.as_str(), "|u1" | "u1" | "<u1" | ">u1" | "=u1" | "<u2");
    if mask_dtype && !fortran_order && (shape.len() == 2 || shape[2..] == [1]) {
        return Ok(Target::Mask);
    }
    let order = if fortran_order { ", Fortran order" } else { "" };
    refuse(
        format!("a .npy of shape {shape:?} ({descr}{order}) over the image's {h}x{w} pixels"),
        "--resize resizes only masks of uint8 or uint16 of shape (H, W) or (H, W, 1) in C order, and cannot tell how to resize this; pack without --resize",
    )
}

/// The sample transform of a pack: the image stage (if any), then the
/// user's transform (if any).
pub(crate) fn chain(
    image: Option<ImageOptions>,
    user: Option<Arc<SampleTransformFn>>,
) -> Option<Arc<SampleTransformFn>> {
    match (image, user) {
        (None, user) => user,
        (Some(opts), None) => Some(Arc::new(move |_key: &str, members: Vec<MemberData>| {
            apply(&opts, members)
        })),
        (Some(opts), Some(user)) => Some(Arc::new(move |key: &str, members: Vec<MemberData>| {
            user(key, apply(&opts, members)?)
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bale_image::Resize;

    /// A 4x3 palette PNG of five colours (PIL's mode "P").
    const PALETTE_PNG: &str = "89504e470d0a1a0a0000000d494844520000000400000003040300000046dab3f50000000f504c5445000000ff000000ff000000ff0909092696ae9d0000001149444154789c63645462b27fcff4e53d0008e8033a5f62ae7f0000000049454e44ae426082";

    /// A 2x2 palette PNG of one colour.
    const SMALL_PNG: &str = "89504e470d0a1a0a0000000d494844520000000200000002010300000048789f6700000003504c5445000000a77a3dda0000000c49444154789c63606060000000040001f61738550000000049454e44ae426082";

    fn bytes(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    fn member(ext: &str, data: Vec<u8>) -> MemberData {
        MemberData {
            ext: ext.to_owned(),
            data,
        }
    }

    fn jpeg_of(png: &str) -> Vec<u8> {
        let opts = ImageOptions {
            format: bale_image::OutputFormat::Jpeg { quality: 90 },
            ..ImageOptions::default()
        };
        bale_image::transform(&opts, "png", bytes(png))
            .unwrap()
            .data
    }

    fn get<'a>(out: &'a [MemberData], ext: &str) -> &'a [u8] {
        &out.iter().find(|m| m.ext == ext).unwrap().data
    }

    #[test]
    fn masks_of_the_image_are_resized_nearest_with_it() {
        let opts = ImageOptions {
            resize: Some("shorter:2".parse::<Resize>().unwrap()),
            ..ImageOptions::default()
        };
        let mask = bytes(PALETTE_PNG);
        let npy =
            bale_format::npy::encode_shape("|u1", &[3, 4], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        let out = apply(
            &opts,
            vec![
                member("mask.png", mask.clone()),
                member("JPG", jpeg_of(PALETTE_PNG)),
                member("seg.npy", npy),
                member("cls", b"3".to_vec()),
            ],
        )
        .unwrap();
        let exts: Vec<&str> = out.iter().map(|m| m.ext.as_str()).collect();
        assert_eq!(
            exts,
            ["JPG", "mask.png", "seg.npy", "cls", ORIGINAL_SIZE_EXT]
        );
        // 4x3 to 3x2; columns 0, 1, 2 and rows 0, 1 by torch's nearest.
        assert_eq!(
            bale_image::region::dimensions("jpg", get(&out, "JPG")).unwrap(),
            (3, 2)
        );
        assert_eq!(
            get(&out, "seg.npy"),
            bale_format::npy::encode_shape("|u1", &[2, 3], &[0, 1, 2, 4, 5, 6])
        );
        let info = bale_image::mask::mask_info("png", get(&out, "mask.png")).unwrap();
        assert_eq!((info.width, info.height), (3, 2));
        // With a format change and no resize, the mask is left as it is.
        let opts = ImageOptions {
            format: bale_image::OutputFormat::Jpeg { quality: 50 },
            ..ImageOptions::default()
        };
        let out = apply(
            &opts,
            vec![
                member("jpg", jpeg_of(PALETTE_PNG)),
                member("mask.png", mask.clone()),
            ],
        )
        .unwrap();
        assert_eq!(get(&out, "mask.png"), mask);
        // Alone, the palette PNG is the image, resized.
        let opts = ImageOptions {
            resize: Some("shorter:2".parse::<Resize>().unwrap()),
            ..ImageOptions::default()
        };
        let out = apply(&opts, vec![member("png", mask.clone())]).unwrap();
        assert!(out.iter().any(|m| m.ext == ORIGINAL_SIZE_EXT));
        assert_ne!(out[0].data, mask);
    }

    #[test]
    fn members_no_nearest_resize_keeps_exact_are_refused() {
        let opts = ImageOptions {
            resize: Some("shorter:2".parse::<Resize>().unwrap()),
            ..ImageOptions::default()
        };
        let image = || member("jpg", jpeg_of(PALETTE_PNG));
        let refused = |m: MemberData| {
            let ext = m.ext.clone();
            let e = apply(&opts, vec![image(), m]).unwrap_err();
            assert_eq!(e.ext.as_deref(), Some(ext.as_str()));
            assert!(
                e.source.to_string().contains("beside the image .jpg"),
                "{e}"
            );
            e.source.to_string()
        };
        // A float array of the image's size.
        let f4 = bale_format::npy::encode_shape("<f4", &[3, 4], &[0; 48]);
        assert!(refused(member("depth.npy", f4)).contains("<f4"));
        // Stacked masks (N, H, W).
        let stack = bale_format::npy::encode_shape("|u1", &[2, 3, 4], &[0; 24]);
        assert!(refused(member("inst.npy", stack)).contains("(H, W, 1)"));
        // A palette PNG of another size, which Lanczos would resample.
        let e = apply(
            &opts,
            vec![
                member("jpg", jpeg_of(SMALL_PNG)),
                member("mask.png", bytes(PALETTE_PNG)),
            ],
        )
        .unwrap_err();
        assert!(
            e.source.to_string().contains("of 4x3, not the image's 2x2"),
            "{e}"
        );
        // Grey with alpha (colour type 4) of the image's size.
        let mut la = bytes(PALETTE_PNG);
        la[25] = 4;
        assert!(refused(member("mask.png", la)).contains("without alpha"));
        // Other arrays stay as they are.
        let boxes = bale_format::npy::encode_shape("<f4", &[2, 4], &[0; 32]);
        let out = apply(&opts, vec![image(), member("boxes.npy", boxes.clone())]).unwrap();
        assert_eq!(get(&out, "boxes.npy"), boxes);
    }
}
