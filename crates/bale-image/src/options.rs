//! Typed options of the image stage, parsed from and printed as the strings
//! the CLI takes (`shorter:256`, `jpeg:90`, `rgb`).

use std::fmt;
use std::str::FromStr;

use crate::ImageError;

/// Pillow's default decompression-bomb limit (`Image.MAX_IMAGE_PIXELS`):
/// 1024 * 1024 * 1024 / 4 / 3 pixels.
pub const DEFAULT_MAX_PIXELS: u64 = 178_956_970;

/// JPEG quality used when none is given (`jpeg`, and `keep` re-encoding a JPEG).
pub const DEFAULT_JPEG_QUALITY: u8 = 90;

/// The image extensions transformed by default (matched against the last
/// dot-separated part of a member's extension, case-insensitively).
pub const DEFAULT_IMAGE_EXTS: &[&str] =
    &["jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "gif"];

/// How to resize. The aspect ratio is always kept; an image is never made
/// larger unless [`ImageOptions::upscale`] is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// The shorter side becomes N (`shorter:N`; torchvision's `Resize(N)`).
    Shorter(u32),
    /// The longer side becomes at most N (`longer:N`; FFCV's `max_resolution`).
    Longer(u32),
    /// The image fits inside a W x H box (`fit:WxH`).
    Fit {
        /// Box width.
        width: u32,
        /// Box height.
        height: u32,
    },
}

/// `a * num / den`, rounded to nearest, at least 1.
fn scale(a: u32, num: u32, den: u32) -> u32 {
    let v = (u64::from(a) * u64::from(num) + u64::from(den) / 2) / u64::from(den);
    v.clamp(1, u64::from(u32::MAX)) as u32
}

impl Resize {
    /// The output size of a `width` x `height` image, or `None` when it keeps
    /// its size (already the target size, or smaller and `upscale` is off).
    ///
    /// The side that sets the scale gets exactly the target; the other is
    /// rounded to nearest (`other * target / side`, halves up), at least 1.
    ///
    /// ```
    /// use bale_image::Resize;
    /// assert_eq!(Resize::Shorter(256).target(500, 375, false), Some((341, 256)));
    /// assert_eq!(Resize::Longer(512).target(500, 375, false), None);
    /// assert_eq!(Resize::Longer(512).target(500, 375, true), Some((512, 384)));
    /// assert_eq!(Resize::Fit { width: 100, height: 100 }.target(400, 200, false), Some((100, 50)));
    /// ```
    pub fn target(self, width: u32, height: u32, upscale: bool) -> Option<(u32, u32)> {
        if width == 0 || height == 0 {
            return None;
        }
        // (side, target) pair that sets the scale.
        let (side_is_width, target) = match self {
            Resize::Shorter(n) => (width <= height, n),
            Resize::Longer(n) => (width >= height, n),
            Resize::Fit {
                width: bw,
                height: bh,
            } => {
                // The binding side: the one whose box ratio is smaller.
                // bw / width <= bh / height  <=>  bw * height <= bh * width.
                let by_width =
                    u64::from(bw) * u64::from(height) <= u64::from(bh) * u64::from(width);
                (by_width, if by_width { bw } else { bh })
            }
        };
        let side = if side_is_width { width } else { height };
        if target == side || (target > side && !upscale) {
            return None;
        }
        let out = if side_is_width {
            (target, scale(height, target, width))
        } else {
            (scale(width, target, height), target)
        };
        (out != (width, height)).then_some(out)
    }
}

impl fmt::Display for Resize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resize::Shorter(n) => write!(f, "shorter:{n}"),
            Resize::Longer(n) => write!(f, "longer:{n}"),
            Resize::Fit { width, height } => write!(f, "fit:{width}x{height}"),
        }
    }
}

fn positive(s: &str, what: &str) -> Result<u32, ImageError> {
    match s.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ImageError::Option(format!(
            "{what} {s:?} is not a whole number of pixels above 0"
        ))),
    }
}

impl FromStr for Resize {
    type Err = ImageError;

    fn from_str(s: &str) -> Result<Self, ImageError> {
        let bad = || {
            ImageError::Option(format!(
                "resize {s:?}: expected shorter:N, longer:N or fit:WxH (e.g. shorter:256)"
            ))
        };
        let (kind, value) = s.split_once(':').ok_or_else(bad)?;
        match kind {
            "shorter" => Ok(Resize::Shorter(positive(value, "size")?)),
            "longer" => Ok(Resize::Longer(positive(value, "size")?)),
            "fit" => {
                let (w, h) = value.split_once(['x', 'X']).ok_or_else(bad)?;
                Ok(Resize::Fit {
                    width: positive(w, "width")?,
                    height: positive(h, "height")?,
                })
            }
            _ => Err(bad()),
        }
    }
}

/// What is stored for a transformed image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// Baseline JPEG at this quality (1..=100), 4:2:0 chroma subsampling;
    /// the member is named `jpg` (or keeps `jpeg`).
    Jpeg {
        /// Quality, 1..=100.
        quality: u8,
    },
    /// PNG (lossless); the member is named `png`.
    Png,
    /// The original bytes when the pixels would not change; otherwise the
    /// image is re-encoded in its own format (JPEG at quality 90), keeping
    /// the member's name.
    Keep,
    /// Decoded pixels as a NumPy `.npy` file (v1.0, C order, shape
    /// `(H, W, C)`, `|u1`, or `<u2` for 16-bit images with `--mode keep`);
    /// the member is named `npy`.
    Raw,
}

impl OutputFormat {
    /// The format's name as the manifest records it: `jpeg`, `png`, `keep`, `raw`.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Jpeg { .. } => "jpeg",
            OutputFormat::Png => "png",
            OutputFormat::Keep => "keep",
            OutputFormat::Raw => "raw",
        }
    }

    /// The JPEG quality, for `jpeg`.
    pub fn quality(self) -> Option<u8> {
        match self {
            OutputFormat::Jpeg { quality } => Some(quality),
            _ => None,
        }
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputFormat::Jpeg { quality } => write!(f, "jpeg:{quality}"),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for OutputFormat {
    type Err = ImageError;

    fn from_str(s: &str) -> Result<Self, ImageError> {
        let (kind, quality) = match s.split_once(':') {
            Some((k, q)) => (k, Some(q)),
            None => (s, None),
        };
        match (kind, quality) {
            ("jpeg" | "jpg", None) => Ok(OutputFormat::Jpeg {
                quality: DEFAULT_JPEG_QUALITY,
            }),
            ("jpeg" | "jpg", Some(q)) => match q.parse::<u8>() {
                Ok(quality @ 1..=100) => Ok(OutputFormat::Jpeg { quality }),
                _ => Err(ImageError::Option(format!(
                    "JPEG quality {q:?} is not a whole number in 1..=100"
                ))),
            },
            ("png", None) => Ok(OutputFormat::Png),
            ("keep", None) => Ok(OutputFormat::Keep),
            ("raw" | "npy", None) => Ok(OutputFormat::Raw),
            _ => Err(ImageError::Option(format!(
                "image format {s:?}: expected jpeg, jpeg:QUALITY, png, keep or raw"
            ))),
        }
    }
}

/// Colour handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorMode {
    /// 8-bit RGB: grayscale is expanded, alpha dropped (as Pillow's
    /// `convert("RGB")`), palettes expanded, CMYK converted, 16-bit reduced.
    #[default]
    Rgb,
    /// The decoded layout is kept (gray, gray+alpha, RGB, RGBA; 8 or 16 bits)
    /// as far as the output format holds it: JPEG drops alpha and stores
    /// 8 bits; PNG and raw hold everything. Palettes are expanded and CMYK is
    /// converted to RGB either way.
    Keep,
}

impl ColorMode {
    /// `rgb` or `keep`.
    pub fn name(self) -> &'static str {
        match self {
            ColorMode::Rgb => "rgb",
            ColorMode::Keep => "keep",
        }
    }
}

impl fmt::Display for ColorMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ColorMode {
    type Err = ImageError;

    fn from_str(s: &str) -> Result<Self, ImageError> {
        match s {
            "rgb" => Ok(ColorMode::Rgb),
            "keep" => Ok(ColorMode::Keep),
            _ => Err(ImageError::Option(format!(
                "colour mode {s:?}: expected rgb or keep"
            ))),
        }
    }
}

/// The options of the image stage. [`ImageOptions::default`] does nothing:
/// no resize, original bytes kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageOptions {
    /// How to resize (default: not at all).
    pub resize: Option<Resize>,
    /// Allow making images larger (default: `false`).
    pub upscale: bool,
    /// What to store (default: [`OutputFormat::Keep`]).
    pub format: OutputFormat,
    /// Colour handling (default: [`ColorMode::Rgb`]).
    pub mode: ColorMode,
    /// Largest image accepted, in pixels (default: [`DEFAULT_MAX_PIXELS`]).
    pub max_pixels: u64,
    /// Which members are images, by extension (default: [`DEFAULT_IMAGE_EXTS`]).
    /// An entry matches an extension equal to it or ending in `.` + entry
    /// (`png` matches `seg.png`), case-insensitively.
    pub exts: Vec<String>,
}

impl Default for ImageOptions {
    fn default() -> Self {
        Self {
            resize: None,
            upscale: false,
            format: OutputFormat::Keep,
            mode: ColorMode::Rgb,
            max_pixels: DEFAULT_MAX_PIXELS,
            exts: DEFAULT_IMAGE_EXTS.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

impl ImageOptions {
    /// Whether these options change anything: a resize, or a format other
    /// than `keep`. Inactive options leave every member as it is.
    pub fn is_active(&self) -> bool {
        self.resize.is_some() || self.format != OutputFormat::Keep
    }

    /// Whether a member with this extension is an image to transform.
    pub fn is_image(&self, ext: &str) -> bool {
        let ext = ext.to_ascii_lowercase();
        self.exts.iter().any(|e| {
            let e = e.to_ascii_lowercase();
            ext == e
                || ext
                    .strip_suffix(e.as_str())
                    .is_some_and(|head| head.ends_with('.'))
        })
    }

    /// Checks the options.
    ///
    /// # Errors
    /// [`ImageError::Option`] for a zero pixel limit, an empty extension
    /// list, or an extension naming a format bale cannot decode.
    pub fn validate(&self) -> Result<(), ImageError> {
        if self.max_pixels == 0 {
            return Err(ImageError::Option(
                "the pixel limit must be more than 0".into(),
            ));
        }
        if self.exts.is_empty() {
            return Err(ImageError::Option(
                "the list of image extensions is empty".into(),
            ));
        }
        for e in &self.exts {
            if e.is_empty() || e.starts_with('.') || e.ends_with('.') || e.contains('/') {
                return Err(ImageError::Option(format!(
                    "image extension {e:?} is not an extension (give e.g. jpg,png)"
                )));
            }
            if !crate::is_image_ext(e) {
                return Err(ImageError::Option(format!(
                    "image extension {e:?} names no format bale decodes (jpg, jpeg, png, webp, bmp, tif, tiff, gif)"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_resize() {
        for s in ["shorter:256", "longer:512", "fit:640x480"] {
            assert_eq!(s.parse::<Resize>().unwrap().to_string(), s);
        }
        assert_eq!(
            "fit:3X4".parse::<Resize>().unwrap(),
            Resize::Fit {
                width: 3,
                height: 4
            }
        );
        for bad in [
            "",
            "256",
            "shorter",
            "shorter:",
            "shorter:0",
            "shorter:-1",
            "short:2",
            "fit:3",
            "fit:0x3",
            "fit:3x",
            "longer:1.5",
        ] {
            assert!(bad.parse::<Resize>().is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_formats_and_modes() {
        assert_eq!(
            "jpeg".parse::<OutputFormat>().unwrap(),
            OutputFormat::Jpeg { quality: 90 }
        );
        assert_eq!(
            "jpeg:75".parse::<OutputFormat>().unwrap(),
            OutputFormat::Jpeg { quality: 75 }
        );
        assert_eq!("raw".parse::<OutputFormat>().unwrap(), OutputFormat::Raw);
        assert_eq!("png".parse::<OutputFormat>().unwrap(), OutputFormat::Png);
        assert_eq!("keep".parse::<OutputFormat>().unwrap(), OutputFormat::Keep);
        for bad in ["jpeg:0", "jpeg:101", "jpeg:x", "png:3", "gif", ""] {
            assert!(bad.parse::<OutputFormat>().is_err(), "{bad}");
        }
        assert_eq!("keep".parse::<ColorMode>().unwrap(), ColorMode::Keep);
        assert!("cmyk".parse::<ColorMode>().is_err());
    }

    #[test]
    fn resize_targets() {
        let s = Resize::Shorter(256);
        assert_eq!(s.target(500, 375, false), Some((341, 256)));
        assert_eq!(s.target(375, 500, false), Some((256, 341)));
        assert_eq!(s.target(256, 300, false), None, "already there");
        assert_eq!(s.target(100, 80, false), None, "no upscale");
        assert_eq!(s.target(100, 80, true), Some((320, 256)));
        assert_eq!(s.target(300, 300, false), Some((256, 256)));
        // Extreme aspect ratios keep at least one pixel.
        assert_eq!(Resize::Shorter(2).target(1000, 3, false), Some((667, 2)));
        assert_eq!(Resize::Longer(10).target(1000, 3, false), Some((10, 1)));
        let l = Resize::Longer(512);
        assert_eq!(l.target(1024, 768, false), Some((512, 384)));
        assert_eq!(l.target(768, 1024, false), Some((384, 512)));
        assert_eq!(l.target(512, 100, false), None);
        assert_eq!(l.target(511, 101, false), None);
        // Odd sizes round to nearest.
        assert_eq!(Resize::Longer(3).target(7, 5, false), Some((3, 2)));
        assert_eq!(Resize::Shorter(1).target(1, 1, false), None);
        assert_eq!(Resize::Shorter(1).target(2, 1, false), None);
        assert_eq!(Resize::Shorter(1).target(3, 2, false), Some((2, 1)));
        let f = Resize::Fit {
            width: 100,
            height: 50,
        };
        assert_eq!(f.target(400, 100, false), Some((100, 25)));
        assert_eq!(f.target(100, 400, false), Some((13, 50)));
        assert_eq!(f.target(200, 100, false), Some((100, 50)));
        assert_eq!(f.target(90, 40, false), None);
        assert_eq!(f.target(90, 40, true), Some((100, 44)));
        assert_eq!(f.target(0, 40, true), None);
    }

    #[test]
    fn matches_image_extensions() {
        let o = ImageOptions::default();
        for e in [
            "jpg", "JPEG", "png", "seg.png", "tif", "tiff", "gif", "webp", "bmp",
        ] {
            assert!(o.is_image(e), "{e}");
        }
        for e in ["json", "cls", "npy", "png.txt", "xpng", "pngx"] {
            assert!(!o.is_image(e), "{e}");
        }
        let only = ImageOptions {
            exts: vec!["jpg".into()],
            ..ImageOptions::default()
        };
        assert!(only.is_image("jpg") && !only.is_image("seg.png"));
        assert!(only.validate().is_ok());
        for bad in [vec![], vec!["txt".to_owned()], vec![".jpg".to_owned()]] {
            let o = ImageOptions {
                exts: bad,
                ..ImageOptions::default()
            };
            assert!(o.validate().is_err());
        }
        assert!(!ImageOptions::default().is_active());
        assert!(
            ImageOptions {
                format: OutputFormat::Raw,
                ..ImageOptions::default()
            }
            .is_active()
        );
    }
}
