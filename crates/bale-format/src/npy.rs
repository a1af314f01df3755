//! NumPy's `.npy` format (versions 1.0, 2.0 and 3.0): the one parser of its
//! header for every crate (the Python package's zero-copy arrays, the HDF5
//! writer's dense arrays, `bale bench --decode`), and the writer of the
//! `.npy` members the image stage stores.
//!
//! Only what a view needs is read: the dtype string, the memory order and the
//! shape. A header whose `descr` is not a plain string (a structured dtype) is
//! [`Header::Other`].

/// What the header of a `.npy` member says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// A plain dtype: the array is a view of `data_offset..` of the member.
    Simple {
        /// The dtype string, e.g. `<f4`, `|u1`, `<U8`.
        descr: String,
        /// Whether the data is in Fortran (column-major) order.
        fortran_order: bool,
        /// The shape; empty for a 0-d array.
        shape: Vec<u64>,
        /// Offset of the array data in the member.
        data_offset: usize,
    },
    /// A valid header this parser does not map (a structured dtype).
    Other,
}

/// A plain array's header: the fields of [`Header::Simple`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Array {
    /// The dtype string, e.g. `<f4`, `|u1`, `<U8`.
    pub descr: String,
    /// Whether the data is in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The shape; empty for a 0-d array.
    pub shape: Vec<u64>,
    /// Offset of the array data in the member.
    pub data_offset: usize,
}

impl Header {
    /// The plain array's header; `None` for a structured dtype.
    pub fn into_array(self) -> Option<Array> {
        match self {
            Header::Simple {
                descr,
                fortran_order,
                shape,
                data_offset,
            } => Some(Array {
                descr,
                fortran_order,
                shape,
                data_offset,
            }),
            Header::Other => None,
        }
    }

    /// Bytes per element of a plain dtype (`<f4` is 4, `|u1` is 1, `<U8` is
    /// 32), from the digits of its `descr`; `None` for a structured dtype or
    /// one without a size.
    pub fn itemsize(&self) -> Option<u64> {
        let Header::Simple { descr, .. } = self else {
            return None;
        };
        let digits: String = descr
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(char::is_ascii_digit)
            .collect();
        let n: u64 = digits.parse().ok().filter(|n| *n > 0)?;
        // `U<n>` counts UCS-4 characters, 4 bytes each.
        let kind = descr.trim_start_matches(['<', '>', '=', '|']);
        if kind.starts_with('U') {
            n.checked_mul(4)
        } else {
            Some(n)
        }
    }

    /// Bytes the array's data takes: the product of the shape and the item
    /// size; `None` when unknown or overflowing.
    pub fn data_len(&self) -> Option<u64> {
        let Header::Simple { shape, .. } = self else {
            return None;
        };
        shape
            .iter()
            .try_fold(1u64, |a, d| a.checked_mul(*d))?
            .checked_mul(self.itemsize()?)
    }

    /// The `(height, width, channels)` of a C-order uint8 3-D array whose
    /// data fills a member of `total` bytes exactly, with the data's offset;
    /// `None` for anything else.
    pub fn u8_hwc(&self, total: u64) -> Option<([usize; 3], usize)> {
        let Header::Simple {
            descr,
            fortran_order: false,
            shape,
            data_offset,
        } = self
        else {
            return None;
        };
        if !matches!(descr.as_str(), "|u1" | "u1" | "<u1" | ">u1" | "=u1") {
            return None;
        }
        let [h, w, c] = shape[..] else { return None };
        let dims = [
            usize::try_from(h).ok()?,
            usize::try_from(w).ok()?,
            usize::try_from(c).ok()?,
        ];
        let pixels = h.checked_mul(w)?.checked_mul(c)?;
        ((*data_offset as u64).checked_add(pixels)? == total && pixels > 0)
            .then_some((dims, *data_offset))
    }
}

/// Encodes `data` (already in the byte order `descr` names) as a version 1.0
/// `.npy` file of `shape`, as `numpy.save` writes it: the header dict padded
/// with spaces to a 64-byte boundary and ended by a newline, then the data in
/// C order. `descr` is a NumPy type string such as `|u1` or `<u2`.
pub fn encode(descr: &str, shape: [usize; 3], data: &[u8]) -> Vec<u8> {
    encode_shape(descr, &shape.map(|d| d as u64), data)
}

/// As [`encode`], for any number of dimensions (none: a 0-d array).
pub fn encode_shape(descr: &str, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let dims = match shape {
        [] => String::new(),
        [d] => format!("{d},"),
        _ => shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}");
    // 6 magic + 2 version + 2 length, the dict, padding, the newline.
    let unpadded = 10 + dict.len() + 1;
    let header_len = dict.len() + 1 + (64 - unpadded % 64) % 64;
    let mut out = Vec::with_capacity(10 + header_len + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header_len as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(10 + header_len - 1, b' ');
    out.push(b'\n');
    out.extend_from_slice(data);
    out
}

/// Parses the header of the `.npy` member `bytes`.
///
/// # Errors
/// A message saying what is wrong (bad magic, unknown version, truncated or
/// malformed header); the caller adds the key and field.
pub fn parse(bytes: &[u8]) -> Result<Header, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy member (no \\x93NUMPY magic)".into());
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len, start): (usize, usize) = match major {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 => {
            let Some(b) = bytes.get(8..12) else {
                return Err("truncated .npy header".into());
            };
            let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            (usize::try_from(len).map_err(|_| "header too long")?, 12)
        }
        _ => return Err(format!("unsupported .npy version {major}.{minor}")),
    };
    let end = start
        .checked_add(len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| format!("truncated .npy header: {len} bytes announced"))?;
    let text = match major {
        3 => std::str::from_utf8(&bytes[start..end]).map_err(|_| "header is not UTF-8")?,
        _ => {
            if !bytes[start..end].is_ascii() {
                return Err("header is not ASCII".into());
            }
            std::str::from_utf8(&bytes[start..end]).map_err(|_| "header is not ASCII")?
        }
    };
    parse_dict(text, end)
}

/// Parses `{'descr': ..., 'fortran_order': ..., 'shape': (...), }`.
fn parse_dict(text: &str, data_offset: usize) -> Result<Header, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    let mut structured = false;
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" => {
                if p.peek() == Some(b'[') {
                    structured = true;
                    p.skip_nested()?;
                    descr = Some(String::new());
                } else {
                    descr = Some(p.string()?);
                }
            }
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            other => return Err(format!("unexpected key {other:?} in .npy header")),
        }
        p.ws();
        if !p.eat(b',') {
            p.ws();
            p.expect(b'}')?;
            break;
        }
    }
    let (Some(descr), Some(fortran_order), Some(shape)) = (descr, fortran, shape) else {
        return Err(".npy header lacks descr, fortran_order or shape".into());
    };
    if structured {
        return Ok(Header::Other);
    }
    Ok(Header::Simple {
        descr,
        fortran_order,
        shape,
        data_offset,
    })
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!(
                "malformed .npy header: expected {:?} at byte {}",
                char::from(c),
                self.i
            ))
        }
    }

    /// A Python string literal in single or double quotes, without escapes.
    fn string(&mut self) -> Result<String, String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(format!(
                    "malformed .npy header: expected a string at byte {}",
                    self.i
                ));
            }
        };
        self.i += 1;
        let start = self.i;
        while let Some(c) = self.peek() {
            if c == b'\\' {
                return Err("escaped string in .npy header".into());
            }
            if c == q {
                let v = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
                self.i += 1;
                return Ok(v);
            }
            self.i += 1;
        }
        Err("malformed .npy header: unterminated string".into())
    }

    fn boolean(&mut self) -> Result<bool, String> {
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.i..].starts_with(word) {
                self.i += word.len();
                return Ok(v);
            }
        }
        Err(format!(
            "malformed .npy header: expected True or False at byte {}",
            self.i
        ))
    }

    /// `(a, b, ...)` of non-negative integers, `()` and `(a,)` included.
    fn tuple(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut v = Vec::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(v);
            }
            let start = self.i;
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
            // Python 2 era writers appended `L` to longs.
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            let n: u64 = digits
                .parse()
                .map_err(|_| format!("malformed .npy header: bad dimension at byte {start}"))?;
            self.eat(b'L');
            v.push(n);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(b')')?;
                return Ok(v);
            }
        }
    }

    /// Skips a bracketed value (`[...]`, nesting and strings included).
    fn skip_nested(&mut self) -> Result<(), String> {
        let mut depth = 0usize;
        while let Some(c) = self.peek() {
            match c {
                b'[' | b'(' => depth += 1,
                b']' | b')' => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or("malformed .npy header: unbalanced brackets")?;
                    if depth == 0 {
                        self.i += 1;
                        return Ok(());
                    }
                }
                b'\'' | b'"' => {
                    self.string()?;
                    continue;
                }
                _ => {}
            }
            self.i += 1;
        }
        Err("malformed .npy header: unterminated descr".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encoded_headers_are_padded_to_64_bytes_and_parse_back() {
        for shape in [[1, 1, 1], [375, 500, 3], [100_000, 100_000, 4]] {
            let out = encode("|u1", shape, &[7]);
            let len = u16::from_le_bytes([out[8], out[9]]) as usize;
            assert_eq!((10 + len) % 64, 0);
            assert_eq!(&out[..8], b"\x93NUMPY\x01\x00");
            assert_eq!(out[10 + len - 1], b'\n');
            assert_eq!(&out[10 + len..], &[7]);
            let h = parse(&out).unwrap();
            assert_eq!(h.itemsize(), Some(1));
            let Header::Simple { shape: s, .. } = &h else {
                panic!("{h:?}")
            };
            assert_eq!(s, &shape.map(|d| d as u64));
        }
        let img = encode("|u1", [2, 3, 3], &[9; 18]);
        let h = parse(&img).unwrap();
        assert_eq!(
            h.u8_hwc(img.len() as u64),
            Some(([2, 3, 3], img.len() - 18))
        );
        assert_eq!(
            h.u8_hwc(img.len() as u64 + 1),
            None,
            "data must fill the member"
        );
        assert_eq!(h.data_len(), Some(18));
        let f4 = encode("<f4", [2, 3, 3], &[0; 72]);
        assert_eq!(parse(&f4).unwrap().u8_hwc(f4.len() as u64), None);
        assert_eq!(parse(&f4).unwrap().data_len(), Some(72));
    }

    fn npy(major: u8, header: &str) -> Vec<u8> {
        let mut v = b"\x93NUMPY".to_vec();
        v.extend([major, 0]);
        if major == 1 {
            v.extend(u16::try_from(header.len()).unwrap().to_le_bytes());
        } else {
            v.extend(u32::try_from(header.len()).unwrap().to_le_bytes());
        }
        v.extend(header.as_bytes());
        v
    }

    #[test]
    fn parses_what_numpy_writes() {
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }          \n";
        let b = npy(1, h);
        assert_eq!(
            parse(&b).unwrap(),
            Header::Simple {
                descr: "<f4".into(),
                fortran_order: false,
                shape: vec![3, 4],
                data_offset: 10 + h.len(),
            }
        );
        let b = npy(
            2,
            "{'descr': '|u1', 'fortran_order': True, 'shape': (7,), }\n",
        );
        assert!(
            matches!(parse(&b).unwrap(), Header::Simple { fortran_order: true, ref shape, .. } if shape == &[7])
        );
        let b = npy(
            3,
            "{\"descr\": \"<U3\", \"fortran_order\": False, \"shape\": ()}",
        );
        let h = parse(&b).unwrap();
        assert!(matches!(h, Header::Simple { ref shape, .. } if shape.is_empty()));
        assert_eq!(h.itemsize(), Some(12), "3 UCS-4 characters");
        let b = npy(
            1,
            "{'descr': [('a', '<i4'), ('b', '<f8', (2,))], 'fortran_order': False, 'shape': (2,), }",
        );
        assert_eq!(parse(&b).unwrap(), Header::Other);
    }

    #[test]
    fn rejects_bad_headers() {
        assert!(parse(b"PK\x03\x04 not npy").unwrap_err().contains("magic"));
        let mut b = npy(
            1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
        );
        b.truncate(30);
        assert!(parse(&b).unwrap_err().contains("truncated"));
        assert!(parse(&npy(9, "{}")).unwrap_err().contains("version 9"));
        assert!(
            parse(&npy(1, "{'descr': '<f4', 'shape': (3,)}"))
                .unwrap_err()
                .contains("lacks")
        );
        assert!(
            parse(&npy(
                1,
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}"
            ))
            .is_err()
        );
        assert!(
            parse(&npy(
                1,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}"
            ))
            .is_err()
        );
        assert!(parse(&npy(1, "{'evil': 1}")).unwrap_err().contains("evil"));
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn never_panics_on_mutated_headers(
            pos in 0usize..80,
            byte in any::<u8>(),
            cut in 0usize..90,
        ) {
            let mut b = npy(1, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (3, 4), }");
            if pos < b.len() { b[pos] = byte; }
            b.truncate(cut.max(1));
            let _ = parse(&b);
        }
    }
}
