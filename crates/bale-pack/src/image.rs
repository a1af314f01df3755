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

/// Transforms the image members of one sample.
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
    if opts.resize.is_some() {
        refuse_resampled_masks(opts, &members)?;
    }
    let mut sizes: BTreeMap<String, BTreeMap<&str, u32>> = BTreeMap::new();
    let mut out = Vec::with_capacity(members.len() + 1);
    for m in members {
        if !opts.is_image(&m.ext) {
            out.push(m);
            continue;
        }
        let t = bale_image::transform(opts, &m.ext, m.data).map_err(|e| fail(&m.ext, e))?;
        if let Some(other) = out.iter().find(|o: &&MemberData| o.ext == t.ext) {
            return Err(SampleTransformError {
                ext: Some(m.ext.clone()),
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

/// The colour type of a PNG (its IHDR's), if `data` begins like one.
fn png_colour_type(data: &[u8]) -> Option<u8> {
    (data.len() > 25 && data.starts_with(b"\x89PNG\r\n\x1a\n") && &data[12..16] == b"IHDR")
        .then(|| data[25])
}

/// Refuses to resize a sample whose image member (the first of
/// [`IMAGE_MEMBERS`] it has, as the loader picks it) sits beside another
/// member the stage would transform that holds a one-channel PNG (grey or
/// palette: a mask). Lanczos resampling would put values in it that its
/// source never held, and it could end another size than its image.
fn refuse_resampled_masks(
    opts: &ImageOptions,
    members: &[MemberData],
) -> Result<(), SampleTransformError> {
    let Some(image) = IMAGE_MEMBERS
        .iter()
        .find_map(|c| members.iter().find(|m| m.ext.eq_ignore_ascii_case(c)))
    else {
        return Ok(());
    };
    for m in members {
        if std::ptr::eq(m, image) || !opts.is_image(&m.ext) {
            continue;
        }
        if matches!(png_colour_type(&m.data), Some(0 | 3)) {
            return Err(SampleTransformError {
                ext: Some(m.ext.clone()),
                source: format!(
                    "a one-channel PNG (a mask?) beside the image .{}: --resize would resample it and invent values it does not hold; pack without --resize (bale.Loader scales masks with their image)",
                    image.ext
                )
                .into(),
            });
        }
    }
    Ok(())
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

    #[test]
    fn a_mask_beside_its_image_is_never_resampled() {
        let opts = ImageOptions {
            resize: Some("shorter:2".parse::<Resize>().unwrap()),
            ..ImageOptions::default()
        };
        let mask = bytes(PALETTE_PNG);
        let e = apply(
            &opts,
            vec![
                member("JPG", b"not read".to_vec()),
                member("mask.png", mask.clone()),
            ],
        )
        .unwrap_err();
        assert_eq!(e.ext.as_deref(), Some("mask.png"));
        assert!(e.source.to_string().contains("the image .JPG"), "{e}");
        // Alone, the palette PNG is the image, resized.
        let out = apply(&opts, vec![member("png", mask.clone())]).unwrap();
        assert!(out.iter().any(|m| m.ext == ORIGINAL_SIZE_EXT));
        assert_ne!(out[0].data, mask);
    }
}
