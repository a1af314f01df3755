//! What a column of another tool's dataset becomes in bale: the member's
//! extension and the bytes it holds, for each value type bale maps.

use super::ForeignError;

/// A NumPy dtype bale writes into `.npy` members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dtype {
    /// NumPy's type string, e.g. `<f4`.
    pub descr: &'static str,
    /// Bytes per element.
    pub size: u64,
}

impl Dtype {
    const fn new(descr: &'static str, size: u64) -> Self {
        Self { descr, size }
    }

    /// By NumPy name (`uint8`, `float32`, ...).
    pub fn by_name(name: &str) -> Option<Self> {
        Some(match name {
            "uint8" => Self::new("|u1", 1),
            "int8" => Self::new("|i1", 1),
            "uint16" => Self::new("<u2", 2),
            "int16" => Self::new("<i2", 2),
            "float16" => Self::new("<f2", 2),
            "uint32" => Self::new("<u4", 4),
            "int32" => Self::new("<i4", 4),
            "float32" => Self::new("<f4", 4),
            "uint64" => Self::new("<u8", 8),
            "int64" => Self::new("<i8", 8),
            "float64" => Self::new("<f8", 8),
            "bool" => Self::new("|b1", 1),
            _ => return None,
        })
    }
}

/// How a column's stored bytes become a member's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// Kept as stored (bytes, text, JPEG, PNG, JSON, files).
    AsIs,
    /// A little-endian integer of this many bytes, written as decimal text.
    Int { size: u8, signed: bool },
    /// A little-endian IEEE float of 2, 4 or 8 bytes, written as the
    /// shortest decimal text that reads back to the same value.
    Float { size: u8 },
    /// One byte, written as `0` or `1`.
    Bool,
    /// MDS's `ndarray` encoding (dtype and shape in the column type, or
    /// ahead of the values), written as `.npy`.
    MdsArray {
        dtype: Option<Dtype>,
        shape: Option<Vec<u64>>,
    },
    /// LitData's `numpy`: u32 dtype code, u32 rank, u32 dims, values.
    LitArray,
    /// LitData's `no_header_numpy:N`: a 1-D array of one dtype.
    LitVector(Dtype),
    /// PIL pixels (`pil` in both tools): u32 width, height and mode length,
    /// the mode, the raw pixels; written as `.npy` (H, W) or (H, W, C).
    Pil,
}

/// Appends `.suffix` to `name` unless it already ends with it (`jpg` stays
/// `jpg`, `image` becomes `image.jpg`).
pub(crate) fn with_suffix(name: &str, suffix: &str) -> String {
    if name == suffix || name.ends_with(&format!(".{suffix}")) {
        name.to_owned()
    } else {
        format!("{name}.{suffix}")
    }
}

impl Value {
    /// The member bytes for a stored value.
    pub fn convert(&self, data: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Value::AsIs => Ok(data.to_vec()),
            Value::Int { size, signed } => {
                let n = fixed::<8>(data, *size as usize)?;
                Ok(if *signed {
                    let shift = 64 - 8 * u32::from(*size);
                    (((u64::from_le_bytes(n) << shift) as i64) >> shift).to_string()
                } else {
                    u64::from_le_bytes(n).to_string()
                }
                .into_bytes())
            }
            Value::Float { size } => {
                let n = fixed::<8>(data, *size as usize)?;
                Ok(match size {
                    2 => format!("{:?}", f16_to_f32(u16::from_le_bytes([n[0], n[1]]))),
                    4 => format!("{:?}", f32::from_le_bytes([n[0], n[1], n[2], n[3]])),
                    _ => format!("{:?}", f64::from_le_bytes(n)),
                }
                .into_bytes())
            }
            Value::Bool => match data {
                [0] => Ok(b"0".to_vec()),
                [_] => Ok(b"1".to_vec()),
                _ => Err(format!("a bool takes 1 byte, this one {}", data.len())),
            },
            Value::MdsArray { dtype, shape } => mds_array(dtype.as_ref(), shape.as_deref(), data),
            Value::LitArray => lit_array(data),
            Value::LitVector(dtype) => {
                if !(data.len() as u64).is_multiple_of(dtype.size) {
                    return Err(format!(
                        "{} bytes is not a whole number of {} values",
                        data.len(),
                        dtype.descr
                    ));
                }
                Ok(crate::npy::encode_shape(
                    dtype.descr,
                    &[data.len() as u64 / dtype.size],
                    data,
                ))
            }
            Value::Pil => pil(data),
        }
    }
}

/// The first `len` bytes of `data` (which must be exactly that long),
/// zero-extended to N.
fn fixed<const N: usize>(data: &[u8], len: usize) -> Result<[u8; N], String> {
    if data.len() != len {
        return Err(format!(
            "a {len}-byte number is stored in {} bytes",
            data.len()
        ));
    }
    let mut out = [0u8; N];
    out[..len].copy_from_slice(data);
    Ok(out)
}

/// IEEE half to single precision (exact).
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let frac = u32::from(h & 0x3ff);
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalise.
            let mut e = 127 - 15 + 1;
            let mut f = frac;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (frac << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (frac << 13),
    };
    f32::from_bits(bits)
}

/// Product of `shape` times `size`, or an error when it overflows.
fn byte_len(shape: &[u64], size: u64) -> Result<u64, String> {
    shape
        .iter()
        .try_fold(size, |a, d| a.checked_mul(*d))
        .ok_or_else(|| format!("shape {shape:?} overflows"))
}

fn check_values(shape: &[u64], dtype: Dtype, values: &[u8]) -> Result<(), String> {
    let want = byte_len(shape, dtype.size)?;
    if want != values.len() as u64 {
        return Err(format!(
            "shape {shape:?} of {} needs {want} bytes, the value holds {}",
            dtype.descr,
            values.len()
        ));
    }
    Ok(())
}

/// MDS's dtype codes (`NDArray._int2value_dtype`).
fn mds_dtype(code: u8) -> Option<Dtype> {
    Dtype::by_name(match code {
        8 => "uint8",
        9 => "int8",
        16 => "uint16",
        17 => "int16",
        18 => "float16",
        32 => "uint32",
        33 => "int32",
        34 => "float32",
        64 => "uint64",
        65 => "int64",
        66 => "float64",
        _ => return None,
    })
}

fn mds_array(dtype: Option<&Dtype>, shape: Option<&[u64]>, data: &[u8]) -> Result<Vec<u8>, String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let end = at
            .checked_add(n)
            .filter(|e| *e <= data.len())
            .ok_or_else(|| format!("ndarray value ends at byte {} of {}", at + n, data.len()))?;
        let s = &data[at..end];
        at = end;
        Ok(s)
    };
    let dtype = match dtype {
        Some(d) => *d,
        None => {
            let code = take(1)?[0];
            mds_dtype(code).ok_or_else(|| format!("unknown ndarray dtype code {code}"))?
        }
    };
    let shape: Vec<u64> = match shape {
        Some(s) => s.to_vec(),
        None => {
            let byte = take(1)?[0];
            let ndim = usize::from(byte >> 2);
            let width = 1usize << (byte & 3);
            let raw = take(ndim * width)?;
            raw.chunks_exact(width)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..width].copy_from_slice(c);
                    u64::from_le_bytes(b)
                })
                .collect()
        }
    };
    let values = &data[at..];
    check_values(&shape, dtype, values)?;
    Ok(crate::npy::encode_shape(dtype.descr, &shape, values))
}

/// LitData's dtype codes (`_NUMPY_SCTYPES`); complex, object, bytes, str
/// and void arrays are refused.
fn lit_dtype(code: u32) -> Option<Dtype> {
    Dtype::by_name(match code {
        0 => "int8",
        1 => "int16",
        2 => "int32",
        3 => "int64",
        4 => "uint8",
        5 => "uint16",
        6 => "uint32",
        7 => "uint64",
        8 => "float16",
        9 => "float32",
        10 => "float64",
        13 => "bool",
        _ => return None,
    })
}

/// LitData's `no_header_numpy:N` dtype.
pub(crate) fn lit_vector_dtype(code: &str) -> Option<Dtype> {
    lit_dtype(code.parse().ok()?)
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, String> {
    data.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| format!("value ends at byte {} before its header", data.len()))
}

fn lit_array(data: &[u8]) -> Result<Vec<u8>, String> {
    let code = u32_at(data, 0)?;
    let dtype = lit_dtype(code).ok_or_else(|| {
        format!("numpy dtype code {code} (complex, object, string or void arrays are not mapped)")
    })?;
    let ndim = u32_at(data, 4)? as usize;
    if ndim > 64 {
        return Err(format!("{ndim} dimensions"));
    }
    let mut shape = Vec::with_capacity(ndim);
    for i in 0..ndim {
        shape.push(u64::from(u32_at(data, 8 + 4 * i)?));
    }
    let values = &data[8 + 4 * ndim..];
    check_values(&shape, dtype, values)?;
    Ok(crate::npy::encode_shape(dtype.descr, &shape, values))
}

fn pil(data: &[u8]) -> Result<Vec<u8>, String> {
    let (w, h, mode_len) = (
        u32_at(data, 0)?,
        u32_at(data, 4)?,
        u32_at(data, 8)? as usize,
    );
    let mode = data
        .get(12..12 + mode_len.min(16))
        .filter(|_| mode_len <= 16)
        .ok_or_else(|| format!("PIL mode of {mode_len} bytes"))?;
    let (shape, descr): (Vec<u64>, &str) = match mode {
        b"L" => (vec![h.into(), w.into()], "|u1"),
        b"RGB" => (vec![h.into(), w.into(), 3], "|u1"),
        b"RGBA" => (vec![h.into(), w.into(), 4], "|u1"),
        other => {
            return Err(format!(
                "PIL mode {:?} (L, RGB and RGBA are mapped; store PNG or JPEG instead)",
                String::from_utf8_lossy(other)
            ));
        }
    };
    let values = &data[12 + mode_len..];
    check_values(&shape, Dtype::new(descr, 1), values)?;
    Ok(crate::npy::encode_shape(descr, &shape, values))
}

/// The column type `encoding` of a MosaicML Streaming dataset: the member's
/// extension (from the column `name`), how its bytes convert, and its fixed
/// size if it has one.
pub(crate) fn mds_column(name: &str, encoding: &str) -> Result<(String, Value), ForeignError> {
    let int = |size: u8, signed| Ok((name.to_owned(), Value::Int { size, signed }));
    let float = |size: u8| Ok((name.to_owned(), Value::Float { size }));
    match encoding {
        "bytes" | "str" | "str_int" | "str_float" | "str_decimal" => {
            Ok((name.to_owned(), Value::AsIs))
        }
        "int" | "int64" => int(8, true),
        "int8" => int(1, true),
        "int16" => int(2, true),
        "int32" => int(4, true),
        "uint8" => int(1, false),
        "uint16" => int(2, false),
        "uint32" => int(4, false),
        "uint64" => int(8, false),
        "float16" => float(2),
        "float32" => float(4),
        "float64" => float(8),
        "json" => Ok((with_suffix(name, "json"), Value::AsIs)),
        "jpeg" => Ok((with_suffix(name, "jpg"), Value::AsIs)),
        "png" => Ok((with_suffix(name, "png"), Value::AsIs)),
        "pil" => Ok((with_suffix(name, "npy"), Value::Pil)),
        e if e == "ndarray" || e.starts_with("ndarray:") => {
            let mut parts = e.split(':').skip(1);
            let dtype = match parts.next() {
                None => None,
                Some(d) => Some(Dtype::by_name(d).filter(|d| d.descr != "|b1").ok_or_else(
                    || ForeignError(format!("column {name:?}: ndarray dtype {d:?} is not known")),
                )?),
            };
            let shape = match parts.next() {
                None => None,
                Some(s) => Some(
                    s.split(',')
                        .map(|d| d.trim().parse::<u64>().ok().filter(|d| *d >= 1))
                        .collect::<Option<Vec<u64>>>()
                        .ok_or_else(|| {
                            ForeignError(format!(
                                "column {name:?}: ndarray shape {s:?} is not valid"
                            ))
                        })?,
                ),
            };
            if parts.next().is_some() {
                return Err(ForeignError(format!(
                    "column {name:?}: ndarray type {e:?} has too many parts"
                )));
            }
            Ok((with_suffix(name, "npy"), Value::MdsArray { dtype, shape }))
        }
        other => Err(ForeignError(format!(
            "column {name:?} has type {other:?}, which bale does not map{}",
            match other {
                "pkl" =>
                    " (a pickle runs code when read; store bytes, str, json or an image instead)",
                _ =>
                    " (mapped: bytes, str, str_int, str_float, str_decimal, int, int8..int64, uint8..uint64, float16..float64, json, jpeg, png, pil, ndarray)",
            }
        ))),
    }
}

/// The LitData leaf type `format` (an entry of `data_format`).
pub(crate) fn lit_column(name: &str, format: &str) -> Result<(String, Value), ForeignError> {
    let (kind, arg) = format.split_once(':').unwrap_or((format, ""));
    match (kind, arg) {
        ("bytes" | "str", "") => Ok((name.to_owned(), Value::AsIs)),
        ("int", "") => Ok((
            name.to_owned(),
            Value::Int {
                size: 8,
                signed: true,
            },
        )),
        ("float", "") => Ok((name.to_owned(), Value::Float { size: 8 })),
        ("bool", "") => Ok((name.to_owned(), Value::Bool)),
        ("jpeg", "") => Ok((with_suffix(name, "jpg"), Value::AsIs)),
        ("pil", "") => Ok((with_suffix(name, "npy"), Value::Pil)),
        ("numpy", "") => Ok((with_suffix(name, "npy"), Value::LitArray)),
        ("no_header_numpy", code) => {
            let dtype = lit_vector_dtype(code).ok_or_else(|| {
                ForeignError(format!(
                    "field {name:?}: numpy dtype code {code:?} is not mapped (complex, object, string or void)"
                ))
            })?;
            Ok((with_suffix(name, "npy"), Value::LitVector(dtype)))
        }
        ("image" | "file", ext)
            if !ext.is_empty() && ext.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            Ok((with_suffix(name, &ext.to_ascii_lowercase()), Value::AsIs))
        }
        _ => Err(ForeignError(format!(
            "field {name:?} has type {format:?}, which bale does not map{}",
            match kind {
                "pickle" =>
                    " (a pickle runs code when read; store bytes, str, numbers, numpy or images instead)",
                _ =>
                    " (mapped: bytes, str, int, float, bool, jpeg, pil, numpy, no_header_numpy, image, file)",
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_decimal_text() {
        let v = Value::Int {
            size: 2,
            signed: true,
        };
        assert_eq!(v.convert(&(-3i16).to_le_bytes()).unwrap(), b"-3");
        let v = Value::Int {
            size: 8,
            signed: false,
        };
        assert_eq!(
            v.convert(&u64::MAX.to_le_bytes()).unwrap(),
            b"18446744073709551615"
        );
        let v = Value::Float { size: 8 };
        assert_eq!(v.convert(&0.1f64.to_le_bytes()).unwrap(), b"0.1");
        let v = Value::Float { size: 2 };
        // 0x3c00 is 1.0, 0x0001 the smallest subnormal (2^-24).
        assert_eq!(v.convert(&0x3c00u16.to_le_bytes()).unwrap(), b"1.0");
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert!(v.convert(&[1, 2, 3]).is_err());
    }

    #[test]
    fn arrays_become_npy() {
        // Dynamic dtype (int16 = 17) and shape (ndim 2, u8 dims): 2x3.
        // Rank 2 in the high bits, shape dtype 0 (u8) in the low two.
        let mut data = vec![17u8, 2 << 2, 2, 3];
        for i in 0..6i16 {
            data.extend_from_slice(&i.to_le_bytes());
        }
        let v = Value::MdsArray {
            dtype: None,
            shape: None,
        };
        let npy = v.convert(&data).unwrap();
        let h = crate::npy::parse(&npy).unwrap();
        assert_eq!(h.data_len(), Some(12));
        assert!(format!("{h:?}").contains("<i2"));
        // A shape that needs more values than stored.
        assert!(v.convert(&data[..data.len() - 1]).is_err());
    }

    #[test]
    fn suffixes_are_added_once() {
        assert_eq!(with_suffix("jpg", "jpg"), "jpg");
        assert_eq!(with_suffix("image", "jpg"), "image.jpg");
        assert_eq!(with_suffix("seg.png", "png"), "seg.png");
        assert!(mds_column("x", "pkl").unwrap_err().0.contains("pickle"));
        assert!(lit_column("x", "tensor").is_err());
    }
}
