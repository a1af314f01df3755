//! Text from data (keys, labels, extensions, file names) escaped before it
//! is printed: a key holding a newline must not forge a line of `bale ls`,
//! and escape sequences must not reach the terminal.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is a control character: C0, DEL or C1.
fn is_control(c: char) -> bool {
    c.is_control()
}

/// `s` with every control character and backslash escaped (`\n`, `\t`,
/// `\r`, `\\`, `\x1b`, `\u{85}`): one field of line-oriented output.
pub fn field(s: &str) -> Cow<'_, str> {
    escaped(s, |c| is_control(c) || c == '\\')
}

/// `s` quoted and escaped as Rust's `{:?}` does (`"a\nb"`), for messages.
pub fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// A message for the terminal: control characters other than the newlines
/// that separate its lines are escaped (they can only come from data, such
/// as a file name holding an escape sequence).
pub fn message(s: &str) -> Cow<'_, str> {
    escaped(s, |c| is_control(c) && c != '\n')
}

/// `s` with the characters `escape` picks written as escapes.
fn escaped(s: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(&escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !escape(c) {
            out.push(c);
            continue;
        }
        let _ = match c {
            '\n' => write!(out, "\\n"),
            '\t' => write!(out, "\\t"),
            '\r' => write!(out, "\\r"),
            '\\' => write!(out, "\\\\"),
            c if (c as u32) < 0x80 => write!(out, "\\x{:02x}", c as u32),
            c => write!(out, "\\u{{{:x}}}", c as u32),
        };
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_backslashes_are_escaped() {
        assert_eq!(field("cat/0001"), "cat/0001");
        assert_eq!(field("fake\n99\tx"), "fake\\n99\\tx");
        assert_eq!(field("\x1b[31mred"), "\\x1b[31mred");
        assert_eq!(field("a\\b"), "a\\\\b");
        assert_eq!(field("\u{85}"), "\\u{85}");
        assert_eq!(quoted("a\x1bb"), "\"a\\u{1b}b\"");
        assert_eq!(message("line one\nline\x1b two"), "line one\nline\\x1b two");
        assert_eq!(message("plain\nhint: x"), "plain\nhint: x");
        assert_eq!(message("\"\\u{1b}\" a\\b\tc"), "\"\\u{1b}\" a\\b\\tc");
    }
}
