//! The NumPy `.npy` format, version 1.0, as `numpy.save` writes it: magic,
//! version, a little-endian header length, a Python dict literal padded with
//! spaces to a 64-byte boundary and ended by a newline, then the data in C order.

/// Encodes `data` (already in the byte order `descr` names) as a `.npy` file
/// of `shape`. `descr` is a NumPy type string such as `|u1` or `<u2`.
pub(crate) fn encode(descr: &str, shape: [usize; 3], data: &[u8]) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': ({}, {}, {}), }}",
        shape[0], shape[1], shape[2]
    );
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

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn header_is_padded_to_64_bytes() {
        for shape in [[1, 1, 1], [375, 500, 3], [100_000, 100_000, 4]] {
            let out = encode("|u1", shape, &[7]);
            let len = u16::from_le_bytes([out[8], out[9]]) as usize;
            assert_eq!((10 + len) % 64, 0);
            assert_eq!(&out[..8], b"\x93NUMPY\x01\x00");
            assert_eq!(out[10 + len - 1], b'\n');
            let dict = std::str::from_utf8(&out[10..10 + len]).unwrap();
            assert!(dict.starts_with(&format!(
                "{{'descr': '|u1', 'fortran_order': False, 'shape': ({}, {}, {}), }}",
                shape[0], shape[1], shape[2]
            )));
            assert_eq!(&out[10 + len..], &[7]);
        }
    }
}
