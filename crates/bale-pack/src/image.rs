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
