//! Sample keys and member names: WebDataset's rule.
//!
//! A member is named `<key>.<ext>`. The key is the member path up to the first
//! dot of its base name; the extension is everything after that dot (it may
//! itself hold dots, as in `seg.png`). So `a/b/0001.seg.png` has key `a/b/0001`
//! and extension `seg.png`.

use crate::error::{FormatError, Result};

/// Splits a member path into `(key, ext)` by WebDataset's rule.
///
/// Returns `None` when the base name has no dot or starts with one (such
/// members belong to no sample; WebDataset skips them too).
///
/// ```
/// assert_eq!(bale_format::split_member_name("a/b/0001.seg.png"), Some(("a/b/0001", "seg.png")));
/// assert_eq!(bale_format::split_member_name("a.b/c"), None);
/// assert_eq!(bale_format::split_member_name("dir/.hidden"), None);
/// ```
pub fn split_member_name(name: &str) -> Option<(&str, &str)> {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    let dot = name[base_start..].find('.')? + base_start;
    if dot == base_start {
        return None;
    }
    Some((&name[..dot], &name[dot + 1..]))
}

/// Checks that `key` can name a sample in a bale shard.
///
/// A key is non-empty UTF-8 with `/`-separated components, none empty, `.` or
/// `..`; it does not start with `/`; its base name holds no dot (the dot starts
/// the extension); it holds no backslash and no control character (C0, DEL, C1:
/// NUL, newline, tab, escape ...).
///
/// # Errors
/// [`FormatError::InvalidName`] saying what is wrong.
pub fn validate_key(key: &str) -> Result<()> {
    let bad = |reason| {
        Err(FormatError::InvalidName {
            name: key.to_owned(),
            reason,
        })
    };
    if key.is_empty() {
        return bad("empty key");
    }
    if key.contains('\0') {
        return bad("key holds a NUL byte");
    }
    if key.contains('\\') {
        return bad("key holds a backslash");
    }
    if key.chars().any(char::is_control) {
        return bad("key holds a control character (a newline, tab, escape or other)");
    }
    if key.starts_with('/') {
        return bad("key is an absolute path");
    }
    for comp in key.split('/') {
        match comp {
            "" => return bad("key has an empty path component"),
            "." | ".." => return bad("key has a '.' or '..' path component"),
            _ => {}
        }
    }
    let base = key.rsplit('/').next().unwrap_or(key);
    if base.contains('.') {
        return bad("the key's base name holds a dot (the first dot starts the extension)");
    }
    Ok(())
}

/// A single pass over `key` that returns `true` only for keys [`validate_key`]
/// accepts (it is exactly as strict); used where millions of keys are checked.
/// Call [`validate_key`] when it returns `false`, for the error.
pub(crate) fn key_is_valid_fast(key: &[u8]) -> bool {
    if key.first().is_none_or(|&b| b == b'/') {
        return false;
    }
    let mut comp_start = 0;
    for (i, &b) in key.iter().enumerate() {
        match b {
            0..=0x1f | 0x7f | b'\\' => return false,
            // U+0080..=U+009F (C1 controls) are 0xC2 0x80..=0x9F in UTF-8.
            0xc2 if key.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)) => return false,
            b'/' => {
                if matches!(&key[comp_start..i], b"" | b"." | b"..") {
                    return false;
                }
                comp_start = i + 1;
            }
            _ => {}
        }
    }
    let base = &key[comp_start..];
    !base.is_empty() && !base.contains(&b'.')
}

/// Checks that `ext` can be a member's extension: non-empty, no `/`, NUL or backslash.
///
/// # Errors
/// [`FormatError::InvalidName`] saying what is wrong.
pub fn validate_ext(ext: &str) -> Result<()> {
    let reason = if ext.is_empty() {
        "empty extension"
    } else if ext.contains('/') {
        "extension holds a '/'"
    } else if ext.contains('\0') {
        "extension holds a NUL byte"
    } else if ext.contains('\\') {
        "extension holds a backslash"
    } else if ext.chars().any(char::is_control) {
        "extension holds a control character (a newline, tab, escape or other)"
    } else if ext.starts_with('.') || ext.ends_with('.') || ext.contains("..") {
        "extension has an empty dot-separated part"
    } else {
        return Ok(());
    };
    Err(FormatError::InvalidName {
        name: ext.to_owned(),
        reason,
    })
}

/// Whether `ext` is a name the readers reserve for a sample's own fields:
/// any extension that starts and ends with two underscores (`__key__`,
/// `__index__`, `__source__`, WebDataset's `__url__` ...). A member with such
/// a name would shadow the field in a reader's dict, so no writer accepts it.
pub fn is_reserved_ext(ext: &str) -> bool {
    ext.len() >= 4 && ext.starts_with("__") && ext.ends_with("__")
}

/// [`validate_ext`], and refuses a name the readers reserve
/// ([`is_reserved_ext`]): the check of every command that writes a member.
///
/// # Errors
/// [`FormatError::InvalidName`] saying what is wrong.
pub fn validate_written_ext(ext: &str) -> Result<()> {
    validate_ext(ext)?;
    if is_reserved_ext(ext) {
        return Err(FormatError::InvalidName {
            name: ext.to_owned(),
            reason: "names that start and end with \"__\" are reserved for the fields readers add (__key__, __index__ ...)",
        });
    }
    Ok(())
}

/// The most bytes of a `.cls` member a writer reads to check it: a label is
/// a decimal integer of at most 20 characters; the rest is room for whitespace.
pub const MAX_LABEL_BYTES: u64 = 4096;

/// Parses a `.cls` member: a decimal integer in ASCII (an optional `+` or
/// `-`, then the digits 0-9) that fits an `i64`, surrounding ASCII whitespace
/// allowed. The one rule of every reader, and of every writer's check.
///
/// ```
/// assert_eq!(bale_format::parse_label(b" 12\n"), Some(12));
/// assert_eq!(bale_format::parse_label(b"3.0"), None);
/// ```
pub fn parse_label(data: &[u8]) -> Option<i64> {
    std::str::from_utf8(data.trim_ascii()).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_follows_webdataset() {
        let cases = [
            ("0001.jpg", Some(("0001", "jpg"))),
            ("a/b/0001.jpg", Some(("a/b/0001", "jpg"))),
            ("a.b/c.d.e", Some(("a.b/c", "d.e"))),
            ("x/y", None),
            ("x/.y", None),
            ("k.", Some(("k", ""))),
        ];
        for (name, want) in cases {
            assert_eq!(split_member_name(name), want, "{name}");
        }
    }

    #[test]
    fn fast_key_check_agrees_with_validate_key() {
        // Every string of up to 6 characters over an alphabet of the special ones.
        let alphabet = ["a", ".", "/", "\\", "\0", "é", "\n", "\u{85}"];
        let mut keys = vec![String::new()];
        for _ in 0..6 {
            let next: Vec<String> = keys
                .iter()
                .flat_map(|k| alphabet.iter().map(move |c| format!("{k}{c}")))
                .collect();
            for k in &keys {
                assert_eq!(
                    key_is_valid_fast(k.as_bytes()),
                    validate_key(k).is_ok(),
                    "{k:?}"
                );
            }
            keys = next;
        }
        for k in &keys {
            assert_eq!(
                key_is_valid_fast(k.as_bytes()),
                validate_key(k).is_ok(),
                "{k:?}"
            );
        }
    }

    #[test]
    fn labels_parse_by_one_rule() {
        for (text, want) in [
            (&b"3"[..], Some(3)),
            (b" 12\n", Some(12)),
            (b"+3", Some(3)),
            (b"03", Some(3)),
            (b"-0", Some(0)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
            (b"", None),
            (b"abc", None),
            (b"3.0", None),
            (b"1_000", None),
            (b"\xd9\xa3", None),  // ARABIC-INDIC DIGIT THREE
            (b"\xc2\xa03", None), // NO-BREAK SPACE: not ASCII whitespace
            (b"3\0", None),
            (b"\xff", None),
        ] {
            assert_eq!(
                parse_label(text),
                want,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn keys_and_exts_are_checked() {
        for ok in ["a", "a/b/c", "n01440764/img_001"] {
            validate_key(ok).unwrap();
        }
        for bad in [
            "", "/a", "a//b", "a/../b", "./a", "a/b.c", "a\0b", "a\\b", "a\nb", "a\tb", "\x1b[31m",
            "a\u{7f}", "a\u{9b}b",
        ] {
            assert!(validate_key(bad).is_err(), "{bad:?}");
        }
        for ok in ["jpg", "seg.png", "__meta__"] {
            validate_ext(ok).unwrap();
        }
        for ok in ["jpg", "__", "___", "__a", "a__", "_key_", "__key__.txt"] {
            validate_written_ext(ok).unwrap();
        }
        for bad in [
            "__key__",
            "__index__",
            "__source__",
            "__url__",
            "____",
            "__KEY__",
        ] {
            assert!(validate_written_ext(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "a/b", ".jpg", "jpg.", "a..b", "a\0", "jp\ng", "\u{1b}"] {
            assert!(validate_ext(bad).is_err(), "{bad:?}");
        }
    }
}
