//! A sample's targets, moved with its image: labels (`.cls`, JSON, `.npy`),
//! masks (each output pixel taken from its source pixel by torch's nearest
//! rule, from rows decoded one at a time) and boxes (moved, clipped and
//! sanitized as torchvision v2 does). Each is checked against its image:
//! what does not fit is an error naming the member, which `on_error`
//! treats as a damaged sample.

use std::cell::RefCell;

use bale_image::mask::{MaskDecoder, MaskRow};
use bale_reader::Sample;

use crate::geometry::SampleParams;
use crate::options::{Crop, LabelSource, LoaderOptions, is_npy};

/// What is wrong with a target: its member and what.
pub(crate) type TargetError = (String, String);

fn bad<T>(member: &str, what: impl Into<String>) -> Result<T, TargetError> {
    Err((member.to_owned(), what.into()))
}

/// The member of `sample` named `want`, its extension matched regardless
/// of case (an exact match first): its extension as stored, and its bytes.
pub(crate) fn find<'s>(sample: &'s Sample, want: &str) -> Option<(&'s str, &'s [u8])> {
    sample
        .fields()
        .find(|(e, _)| *e == want)
        .or_else(|| sample.fields().find(|(e, _)| e.eq_ignore_ascii_case(want)))
}

/// The most bytes of a JSON member (labels, boxes) the loader parses: a
/// parsed value takes several times its text's memory, per thread.
pub(crate) const MAX_JSON_BYTES: usize = 64 << 20;

/// Parses the JSON member `ext`.
fn parse_json(ext: &str, bytes: &[u8]) -> Result<serde_json::Value, TargetError> {
    if bytes.len() > MAX_JSON_BYTES {
        return bad(
            ext,
            format!(
                "holds {} bytes of JSON, more than the {} MiB the loader parses",
                bytes.len(),
                MAX_JSON_BYTES >> 20
            ),
        );
    }
    serde_json::from_slice(bytes)
        .map_err(|e| (ext.to_owned(), format!("does not parse as JSON: {e}")))
}

// ---- labels -------------------------------------------------------------

/// Reads the class of `sample` from `source` (not `.cls`, whose value the
/// reader parsed).
pub(crate) fn json_label(source: &LabelSource, sample: &Sample) -> Result<i64, TargetError> {
    let LabelSource::Json { member, key } = source else {
        unreachable!("a JSON label source")
    };
    let Some((ext, bytes)) = find(sample, member) else {
        return bad(
            member,
            "the sample has no such member to take its label from",
        );
    };
    let value = parse_json(ext, bytes)?;
    let value = match key {
        None => &value,
        Some(k) => value
            .as_object()
            .ok_or_else(|| {
                (
                    ext.to_owned(),
                    format!("is not a JSON object with a {k:?} key"),
                )
            })?
            .get(k)
            .ok_or_else(|| (ext.to_owned(), format!("has no {k:?} key")))?,
    };
    value.as_i64().ok_or_else(|| {
        let at = key.as_ref().map_or(String::new(), |k| format!(" at {k:?}"));
        (
            ext.to_owned(),
            format!("holds {value}{at}, not an integer label"),
        )
    })
}

/// The values of a `.npy` vector (a multi-label target) as `float32`.
pub(crate) fn npy_vector(ext: &str, bytes: &[u8]) -> Result<Vec<f32>, TargetError> {
    let mut out = Vec::new();
    npy_vector_into(ext, bytes, &mut out)?;
    Ok(out)
}

/// As [`npy_vector`], into `out` (cleared first).
fn npy_vector_into(ext: &str, bytes: &[u8], out: &mut Vec<f32>) -> Result<(), TargetError> {
    let header = bale_format::npy::parse(bytes).map_err(|e| (ext.to_owned(), e))?;
    let Some(a) = header.into_array() else {
        return bad(ext, "a label vector is a plain numeric array");
    };
    let [n] = a.shape[..] else {
        return bad(
            ext,
            format!("a label vector has shape (C,), not {:?}", a.shape),
        );
    };
    let values = numbers(ext, &a.descr, &bytes[a.data_offset..], n as usize)?;
    out.clear();
    out.extend(values);
    Ok(())
}

/// The `n` numbers of dtype `descr` in `data`, as `f64` (booleans as 0, 1).
fn numbers<'a>(
    ext: &str,
    descr: &str,
    data: &'a [u8],
    n: usize,
) -> Result<impl Iterator<Item = f32> + 'a, TargetError> {
    let kind = descr.trim_start_matches(['<', '|', '=']);
    if descr.starts_with('>') && !kind.ends_with('1') {
        return bad(ext, format!("big-endian {descr} values are not read"));
    }
    let size: usize = match kind {
        "b1" | "u1" | "i1" => 1,
        "u2" | "i2" | "f2" => 2,
        "u4" | "i4" | "f4" => 4,
        "u8" | "i8" | "f8" => 8,
        other => return bad(ext, format!("{other} values are not numbers bale reads")),
    };
    if n.checked_mul(size) != Some(data.len()) {
        return bad(
            ext,
            format!(
                "{n} {kind} values do not fill the member's {} data bytes",
                data.len()
            ),
        );
    }
    let kind = kind.to_owned();
    Ok(data.chunks_exact(size).map(move |b| {
        let arr8 = |b: &[u8]| {
            let mut a = [0u8; 8];
            a[..b.len()].copy_from_slice(b);
            a
        };
        match kind.as_str() {
            "b1" | "u1" => f32::from(b[0]),
            "i1" => f32::from(b[0] as i8),
            "u2" => f32::from(u16::from_le_bytes([b[0], b[1]])),
            "i2" => f32::from(i16::from_le_bytes([b[0], b[1]])),
            "f2" => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
            "u4" => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
            "i4" => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
            "f4" => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            "u8" => u64::from_le_bytes(arr8(b)) as f32,
            "i8" => i64::from_le_bytes(arr8(b)) as f32,
            _ => f64::from_le_bytes(arr8(b)) as f32,
        }
    }))
}

thread_local! {
    static VECTOR: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Writes the `.npy` label vector of `sample` into `out` (its length is the
/// loader's number of classes).
pub(crate) fn npy_label(member: &str, sample: &Sample, out: &mut [f32]) -> Result<(), TargetError> {
    let Some((ext, bytes)) = find(sample, member) else {
        return bad(
            member,
            "the sample has no such member to take its label from",
        );
    };
    VECTOR.with(|v| {
        let mut v = v.borrow_mut();
        npy_vector_into(ext, bytes, &mut v)?;
        if v.len() != out.len() {
            return bad(
                ext,
                format!(
                    "holds {} values; the first sample's label has {}",
                    v.len(),
                    out.len()
                ),
            );
        }
        out.copy_from_slice(&v);
        Ok(())
    })
}

// ---- masks --------------------------------------------------------------

/// Which source pixel each output pixel of a mask takes: the plan shared by
/// a sample's masks.
#[derive(Debug, Default)]
struct MaskPlan {
    /// Per output column, the source column (`NONE`: padding).
    cols: Vec<u32>,
    /// `(source row, output row)` for every output row showing the image,
    /// by source row.
    rows: Vec<(u32, u32)>,
    /// Output rows of padding.
    fill_rows: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl MaskPlan {
    fn build(&mut self, p: &SampleParams) {
        let (ax, ay) = p.axes();
        self.cols.clear();
        self.cols
            .extend((0..p.out.0).map(|o| ax.source(o).unwrap_or(NONE)));
        self.rows.clear();
        self.fill_rows.clear();
        for o in 0..p.out.1 {
            match ay.source(o) {
                Some(s) => self.rows.push((s, o)),
                None => self.fill_rows.push(o),
            }
        }
        self.rows.sort_unstable();
    }
}

thread_local! {
    static MASKS: RefCell<(MaskPlan, MaskDecoder)> = RefCell::new(Default::default());
}

/// Where a sample's mask is written: its slot of the batch's array.
pub(crate) enum MaskSlot<'a> {
    /// `uint8` masks.
    U8(&'a mut [u8]),
    /// `int64` masks.
    I64(&'a mut [i64]),
}

/// Writes the masks `members` of `sample` (of an image of `p.image`
/// pixels) through the geometry `p` into `slots`, one per member.
pub(crate) fn render_masks(
    opts: &LoaderOptions,
    sample: &Sample,
    p: &SampleParams,
    mut slots: Vec<MaskSlot<'_>>,
) -> Result<(), TargetError> {
    MASKS.with(|cell| {
        let (plan, decoder) = &mut *cell.borrow_mut();
        plan.build(p);
        for (member, slot) in opts.masks.iter().zip(slots.iter_mut()) {
            render_mask(opts, sample, p, member, plan, decoder, slot)?;
        }
        Ok(())
    })
}

fn render_mask(
    opts: &LoaderOptions,
    sample: &Sample,
    p: &SampleParams,
    member: &str,
    plan: &MaskPlan,
    decoder: &mut MaskDecoder,
    slot: &mut MaskSlot<'_>,
) -> Result<(), TargetError> {
    let Some((ext, bytes)) = find(sample, member) else {
        return bad(member, "the sample has no such mask");
    };
    let te = |e: bale_image::ImageError| (ext.to_owned(), e.to_string());
    let info = bale_image::mask::mask_info(ext, bytes).map_err(te)?;
    if (info.width, info.height) != p.image {
        return bad(
            ext,
            format!(
                "the mask is {}x{} pixels, its image {}x{}",
                info.width, info.height, p.image.0, p.image.1
            ),
        );
    }
    let out_w = p.out.0 as usize;
    let fill = opts.mask_fill;
    // Padding rows first, then the image's rows as they are decoded.
    for &o in &plan.fill_rows {
        let at = o as usize * out_w..(o as usize + 1) * out_w;
        match slot {
            MaskSlot::U8(m) => m[at].fill(fill as u8),
            MaskSlot::I64(m) => m[at].fill(fill),
        }
    }
    let last = plan.rows.last().map_or(0, |&(s, _)| s + 1);
    let mut next = 0;
    let rows = &plan.rows;
    let cols = &plan.cols;
    decoder
        .rows(ext, bytes, opts.max_pixels, last, |y, row| {
            while next < rows.len() && rows[next].0 == y {
                let o = rows[next].1 as usize;
                let at = o * out_w..(o + 1) * out_w;
                let overflow = |v: u32| bale_image::ImageError::Decode {
                    ext: ext.to_owned(),
                    message: format!(
                        "a 16-bit mask holds {v} at row {y}, more than uint8 masks hold: ask for mask_dtype=\"int64\""
                    ),
                };
                let never = |_: u32| unreachable!("every value fits");
                match (&mut *slot, row) {
                    (MaskSlot::U8(m), MaskRow::U8(r)) => {
                        map_row(&mut m[at], cols, r, fill as u8, Some).map_err(never)?;
                    }
                    (MaskSlot::I64(m), MaskRow::U8(r)) => {
                        map_row(&mut m[at], cols, r, fill, |v| Some(i64::from(v))).map_err(never)?;
                    }
                    (MaskSlot::I64(m), MaskRow::U16(r)) => {
                        map_row(&mut m[at], cols, r, fill, |v| Some(i64::from(v))).map_err(never)?;
                    }
                    (MaskSlot::U8(m), MaskRow::U16(r)) => {
                        map_row(&mut m[at], cols, r, fill as u8, |v| u8::try_from(v).ok())
                            .map_err(overflow)?;
                    }
                }
                next += 1;
            }
            Ok(())
        })
        .map_err(te)?;
    Ok(())
}

/// Writes `out[x] = row[cols[x]]` (`fill` where `cols[x]` is padding);
/// a value `conv` refuses is returned.
fn map_row<S: Copy + Into<u32>, T: Copy>(
    out: &mut [T],
    cols: &[u32],
    row: &[S],
    fill: T,
    conv: impl Fn(S) -> Option<T>,
) -> Result<(), u32> {
    for (o, &c) in out.iter_mut().zip(cols) {
        *o = if c == NONE {
            fill
        } else {
            let v = row[c as usize];
            conv(v).ok_or(v.into())?
        };
    }
    Ok(())
}

// ---- boxes --------------------------------------------------------------

thread_local! {
    static BOXES: RefCell<(Vec<[f32; 4]>, Vec<i64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Where a sample's boxes are written: its slots of the batch's arrays.
pub(crate) struct BoxSlot<'a> {
    /// `max_boxes * 4` coordinates.
    pub coords: &'a mut [f32],
    /// `max_boxes` labels.
    pub labels: &'a mut [i64],
    /// The count.
    pub count: &'a mut i64,
}

/// Reads the boxes (and their labels) of `sample`, checks them against the
/// image, moves them through the geometry `p`, drops those too small
/// (torchvision's `SanitizeBoundingBoxes`) and writes the rest into `slot`.
pub(crate) fn render_boxes(
    opts: &LoaderOptions,
    sample: &Sample,
    p: &SampleParams,
    slot: BoxSlot<'_>,
) -> Result<(), TargetError> {
    let Some(member) = opts.boxes.as_deref() else {
        return Ok(());
    };
    BOXES.with(|cell| {
        let (boxes, labels) = &mut *cell.borrow_mut();
        boxes.clear();
        labels.clear();
        let Some((ext, bytes)) = find(sample, member) else {
            return bad(member, "the sample has no such member to take its boxes from");
        };
        read_boxes(ext, bytes, boxes, labels)?;
        if let Some(lm) = opts.box_labels.as_deref() {
            let Some((lext, lbytes)) = find(sample, lm) else {
                return bad(lm, "the sample has no such member to take its box labels from");
            };
            labels.clear();
            read_labels(lext, lbytes, labels)?;
        } else if labels.len() != boxes.len() && labels.is_empty() {
            return bad(
                ext,
                "holds boxes without labels: give them a \"labels\" list, or name a box_labels member",
            );
        }
        if labels.len() != boxes.len() {
            return bad(
                ext,
                format!("holds {} boxes and {} labels", boxes.len(), labels.len()),
            );
        }
        check_boxes(ext, boxes, p.image)?;
        let (ax, ay) = p.axes();
        let clamp = p.clamps_boxes(matches!(opts.crop, Crop::RandomResized | Crop::Center));
        let (ow, oh) = (p.out.0 as f32, p.out.1 as f32);
        let (min_size, min_area) = (opts.min_box_size as f32, opts.min_box_area as f32);
        let mut kept = 0;
        for (b, &label) in boxes.iter().zip(labels.iter()) {
            let (x1, x2) = ax.edges(b[0], b[2], clamp);
            let (y1, y2) = ay.edges(b[1], b[3], clamp);
            let (w, h) = (x2 - x1, y2 - y1);
            let valid = w >= min_size
                && h >= min_size
                && x1 >= 0.0
                && y1 >= 0.0
                && x2 >= 0.0
                && y2 >= 0.0
                && w * h >= min_area
                && x1 <= ow
                && x2 <= ow
                && y1 <= oh
                && y2 <= oh;
            if !valid {
                continue;
            }
            if kept == opts.max_boxes {
                return bad(
                    ext,
                    format!(
                        "keeps more than max_boxes={} boxes after the crop: raise max_boxes",
                        opts.max_boxes
                    ),
                );
            }
            slot.coords[kept * 4..kept * 4 + 4].copy_from_slice(&[x1, y1, x2, y2]);
            slot.labels[kept] = label;
            kept += 1;
        }
        slot.coords[kept * 4..].fill(0.0);
        slot.labels[kept..].fill(-1);
        *slot.count = kept as i64;
        Ok(())
    })
}

/// Parses boxes (and any labels beside them) from a JSON or `.npy` member.
fn read_boxes(
    ext: &str,
    bytes: &[u8],
    boxes: &mut Vec<[f32; 4]>,
    labels: &mut Vec<i64>,
) -> Result<(), TargetError> {
    if is_npy(ext) {
        let header = bale_format::npy::parse(bytes).map_err(|e| (ext.to_owned(), e))?;
        let Some(a) = header.into_array() else {
            return bad(ext, "boxes are a plain numeric array of shape (N, 4)");
        };
        let n = match a.shape[..] {
            [n, 4] if !a.fortran_order => n as usize,
            [0] => 0,
            _ => {
                return bad(
                    ext,
                    format!(
                        "boxes are a C-order array of shape (N, 4), not {:?}",
                        a.shape
                    ),
                );
            }
        };
        let values: Vec<f32> = numbers(ext, &a.descr, &bytes[a.data_offset..], n * 4)?.collect();
        boxes.extend(values.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]));
        return Ok(());
    }
    let value = parse_json(ext, bytes)?;
    let list = match &value {
        serde_json::Value::Array(a) => a,
        serde_json::Value::Object(o) => {
            if let Some(l) = o.get("labels") {
                json_ints(ext, l, "labels", labels)?;
            }
            match o.get("boxes") {
                Some(serde_json::Value::Array(a)) => a,
                Some(other) => return bad(ext, format!("\"boxes\" is {other}, not a list")),
                None => return bad(ext, "is a JSON object without \"boxes\""),
            }
        }
        other => return bad(ext, format!("is {other}, not a list of boxes")),
    };
    for (i, b) in list.iter().enumerate() {
        let coords = b.as_array().filter(|a| a.len() == 4).ok_or_else(|| {
            (
                ext.to_owned(),
                format!("box {i} is {b}, not [x1, y1, x2, y2]"),
            )
        })?;
        let mut c = [0f32; 4];
        for (v, j) in c.iter_mut().zip(coords) {
            *v = j
                .as_f64()
                .ok_or_else(|| (ext.to_owned(), format!("box {i} is {b}, not four numbers")))?
                as f32;
        }
        boxes.push(c);
    }
    Ok(())
}

/// The integers of the JSON list `v` (named `what`) into `out`.
fn json_ints(
    ext: &str,
    v: &serde_json::Value,
    what: &str,
    out: &mut Vec<i64>,
) -> Result<(), TargetError> {
    let list = v
        .as_array()
        .ok_or_else(|| (ext.to_owned(), format!("{what} is {v}, not a list")))?;
    for (i, x) in list.iter().enumerate() {
        out.push(x.as_i64().ok_or_else(|| {
            (
                ext.to_owned(),
                format!("{what}[{i}] is {x}, not an integer"),
            )
        })?);
    }
    Ok(())
}

/// Box labels from their own member: a JSON list or a `.npy` `(N,)` array.
fn read_labels(ext: &str, bytes: &[u8], out: &mut Vec<i64>) -> Result<(), TargetError> {
    if is_npy(ext) {
        for v in npy_vector(ext, bytes)? {
            if v.fract() != 0.0 || !v.is_finite() {
                return bad(ext, format!("holds {v}, not an integer label"));
            }
            out.push(v as i64);
        }
        return Ok(());
    }
    let value = parse_json(ext, bytes)?;
    json_ints(ext, &value, "the list", out)
}

/// Refuses boxes that do not lie in a `width` x `height` image as `x1 <=
/// x2`, `y1 <= y2`.
fn check_boxes(ext: &str, boxes: &[[f32; 4]], (w, h): (u32, u32)) -> Result<(), TargetError> {
    let (wf, hf) = (w as f32, h as f32);
    for (i, b) in boxes.iter().enumerate() {
        let [x1, y1, x2, y2] = *b;
        let what = if b.iter().any(|v| !v.is_finite()) {
            "has a coordinate that is not a number"
        } else if b.iter().any(|v| *v < 0.0) {
            "has a negative coordinate"
        } else if x1 > x2 || y1 > y2 {
            "is not x1 <= x2, y1 <= y2 (xyxy)"
        } else if x2 > wf || y2 > hf {
            "lies outside the image"
        } else {
            continue;
        };
        return bad(ext, format!("box {i} {b:?} {what} ({w}x{h} pixels)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_parse_from_json_and_npy() {
        let (mut b, mut l) = (Vec::new(), Vec::new());
        read_boxes(
            "json",
            br#"{"boxes": [[1, 2, 3, 4.5]], "labels": [7]}"#,
            &mut b,
            &mut l,
        )
        .unwrap();
        assert_eq!(
            (b.clone(), l.clone()),
            (vec![[1.0, 2.0, 3.0, 4.5]], vec![7])
        );
        b.clear();
        l.clear();
        read_boxes("json", b"[[0, 0, 1, 1], [2, 2, 3, 3]]", &mut b, &mut l).unwrap();
        assert_eq!((b.len(), l.len()), (2, 0));
        let data: Vec<u8> = [1.0f64, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let npy = bale_format::npy::encode_shape("<f8", &[1, 4], &data);
        b.clear();
        read_boxes("boxes.npy", &npy, &mut b, &mut l).unwrap();
        assert_eq!(b, vec![[1.0, 2.0, 3.0, 4.0]]);
        for bad in [
            &b"{"[..],
            b"[[1, 2, 3]]",
            b"{\"boxes\": 3}",
            b"[[1, 2, \"a\", 4]]",
            b"5",
        ] {
            assert!(
                read_boxes("json", bad, &mut b, &mut l).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn boxes_that_do_not_fit_their_image_are_refused() {
        let ok = [[0.0, 0.0, 640.0, 480.0], [10.0, 10.0, 10.0, 20.0]];
        assert!(check_boxes("json", &ok, (640, 480)).is_ok());
        for (b, what) in [
            ([0.0, 0.0, 641.0, 10.0], "outside"),
            ([f32::NAN, 0.0, 1.0, 1.0], "not a number"),
            ([-1.0, 0.0, 1.0, 1.0], "negative"),
            ([5.0, 0.0, 1.0, 1.0], "xyxy"),
        ] {
            let e = check_boxes("json", &[b], (640, 480)).unwrap_err().1;
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn a_json_member_over_the_bound_is_refused_unparsed() {
        let mut big = b"[".to_vec();
        big.resize(MAX_JSON_BYTES + 1, b' ');
        let e = parse_json("json", &big).unwrap_err().1;
        assert!(e.contains("MiB"), "{e}");
        assert!(parse_json("json", b"[1, 2]").is_ok());
    }

    #[test]
    fn npy_vectors_read_as_float32() {
        let data: Vec<u8> = [0u8, 1, 1, 0].to_vec();
        let npy = bale_format::npy::encode_shape("|b1", &[4], &data);
        assert_eq!(npy_vector("npy", &npy).unwrap(), vec![0.0, 1.0, 1.0, 0.0]);
        let data: Vec<u8> = [0.5f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let npy = bale_format::npy::encode_shape("<f4", &[2], &data);
        assert_eq!(npy_vector("npy", &npy).unwrap(), vec![0.5, 2.0]);
        let npy = bale_format::npy::encode_shape("<f4", &[1, 2], &data);
        assert!(npy_vector("npy", &npy).is_err());
    }
}
