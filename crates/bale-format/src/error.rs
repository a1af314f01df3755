//! The one error type of `bale-format`.

use std::io;
use std::path::{Path, PathBuf};

/// A result with [`FormatError`].
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// Everything that can go wrong reading or writing bale's on-disk format.
///
/// Every variant that concerns a file names it, and where a position in the
/// file is known, the byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// An I/O error on a file.
    #[error("{}", io_text(path, source))]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An I/O error at a known position of a file.
    #[error("{} at offset {offset}: {source}", shown(path))]
    IoAt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the failed read or write.
        offset: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file ends before a structure it must hold.
    #[error(
        "{} is truncated: {what} needs bytes up to offset {needed}, the file has {len}",
        shown(path)
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was being read.
        what: &'static str,
        /// The offset the structure would need to reach.
        needed: u64,
        /// The file's length.
        len: u64,
    },
    /// The file does not start with the expected magic bytes: not a bale file.
    #[error("{} is not a bale {what} (bad magic at offset 0)", shown(path))]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// `"index"` or `"manifest"`.
        what: &'static str,
    },
    /// The file was written by a newer, incompatible version of the format.
    #[error(
        "{} has format version {major}.{minor}, this bale reads major version {supported}; upgrade bale",
        shown(path)
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Major version found.
        major: u32,
        /// Minor version found.
        minor: u32,
        /// The major version this build understands.
        supported: u32,
    },
    /// The structure of a file is inconsistent.
    #[error("{} is corrupt at offset {offset}: {what}", shown(path))]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the first bad byte or record.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A checksum stored in a file does not match its bytes.
    #[error(
        "{} checksum mismatch{}: stored {expected:016x}, computed {actual:016x}",
        shown(path),
        location
    )]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// Where the bad bytes are, already formatted (`" for key K member ext at offset N"`).
        location: String,
        /// Checksum recorded.
        expected: u64,
        /// Checksum of the bytes read.
        actual: u64,
    },
    /// A tar header that cannot be parsed or is not supported.
    #[error("{} at offset {offset}: {what}", shown(path))]
    Tar {
        /// The file.
        path: PathBuf,
        /// Byte offset of the header (in the uncompressed tar stream).
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The manifest is not valid JSON or does not describe a dataset.
    #[error("{}: invalid manifest: {what}", shown(path))]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong, with line and column for JSON errors.
        what: String,
    },
    /// A directory holds no manifest: it is not a bale dataset, or its writing did not finish.
    #[error(
        "{} is not a complete bale dataset: it has no bale.json (a pack that did not finish leaves none)",
        shown(dir)
    )]
    Incomplete {
        /// The dataset directory.
        dir: PathBuf,
    },
    /// A key or extension that bale cannot store.
    #[error("invalid member name {name:?}: {reason}")]
    InvalidName {
        /// The key or `key.ext` name.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A key appears twice in one shard.
    #[error("duplicate key {key:?} in shard {}", shown(path))]
    DuplicateKey {
        /// The shard being written.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// The HDF5 library failed on a shard (feature `hdf5`), or this build has no HDF5 support.
    #[error("{}: hdf5: {what}", shown(path))]
    Hdf5 {
        /// The shard file.
        path: PathBuf,
        /// The library's message.
        what: String,
    },
    /// A key's members appear in two runs apart in a tar (WebDataset wants a
    /// sample's members consecutive), and the scan was told to refuse that.
    #[error(
        "{} at offset {offset}: members of sample {key:?} are not contiguous: they appear at offset {first} (sample {sample}) and again at offset {offset} after other samples; WebDataset's rule is that a sample's members are consecutive",
        shown(path)
    )]
    SplitSample {
        /// The tar file.
        path: PathBuf,
        /// Offset of the later run's first header.
        offset: u64,
        /// The key as the tar names it.
        key: String,
        /// Offset of the key's first run.
        first: u64,
        /// Number of the sample the first run formed.
        sample: u64,
    },
    /// A shard index disagrees with what the manifest records about it.
    #[error("{} does not match the manifest: {what}", shown(path))]
    IndexMismatch {
        /// The index file.
        path: PathBuf,
        /// What differs.
        what: String,
    },
    /// A path bale must read as a regular file is something else.
    #[error(
        "{} is {kind}, not a regular file; bale reads only regular files",
        shown(path)
    )]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is (`"a FIFO"`, `"a device"`).
        kind: &'static str,
    },
    /// Another process holds the lock on a directory bale is about to write.
    #[error(
        "{} is being written by another bale command (it holds the directory's lock); wait for it to finish, or write elsewhere",
        shown(dir)
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// A path bale must create a file or directory through is something else
    /// (a symlink, a file where a directory is needed).
    #[error("{} is {kind}; refusing to write through it", shown(path))]
    InTheWay {
        /// The path in the way.
        path: PathBuf,
        /// What it is (`"a symlink"`, `"a regular file"`).
        kind: &'static str,
    },
    /// A file bale was about to create already exists, and bale did not create it.
    #[error(
        "{} already exists; refusing to replace a file this command did not create",
        shown(path)
    )]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// Another tool's dataset (MosaicML Streaming, LitData) holds something
    /// bale cannot map: a column type, a compression, a layout.
    #[error("{}: {what}", shown(path))]
    Unsupported {
        /// The file that says so (`index.json`, a shard).
        path: PathBuf,
        /// What, and what to do about it.
        what: String,
    },
    /// A value does not fit the format's limits.
    #[error("{}: {what}", shown(path))]
    Limit {
        /// The file.
        path: PathBuf,
        /// Which limit.
        what: String,
    },
}

impl FormatError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn io_at(path: impl Into<PathBuf>, offset: u64, source: io::Error) -> Self {
        FormatError::IoAt {
            path: path.into(),
            offset,
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Self {
        FormatError::Corrupt {
            path: path.into(),
            offset,
            what: what.into(),
        }
    }

    /// `end_sample` called with no sample open, in the shard `path`.
    pub(crate) fn no_open_sample(path: &Path) -> Self {
        FormatError::Limit {
            path: path.to_path_buf(),
            what: "end_sample without an open sample".into(),
        }
    }

    /// A sample `key` that ended without members.
    pub(crate) fn empty_sample(key: String) -> Self {
        FormatError::InvalidName {
            name: key,
            reason: "a sample needs at least one member",
        }
    }

    pub(crate) fn tar(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Self {
        FormatError::Tar {
            path: path.into(),
            offset,
            what: what.into(),
        }
    }
}

/// `path: source`, or the source alone when it already starts by naming
/// the path (the storage layer's errors name their URL).
fn io_text(path: &Path, source: &io::Error) -> String {
    let name = shown(path).to_string();
    let text = source.to_string();
    if text.starts_with(&name) {
        text
    } else {
        format!("{name}: {text}")
    }
}

/// Shows a path in a message with its control characters escaped (`\n`,
/// `\t`, `\x1b`, `\u{85}`): a file name cannot forge a line or send an
/// escape sequence to the terminal. `format!("{}", shown(&path))`.
pub fn shown(path: &Path) -> Shown<'_> {
    Shown(path)
}

/// See [`shown`].
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(&'a Path);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Bytes that are not UTF-8 as `\xNN`, so that two such names stay
        // apart (a lossy conversion shows both as U+FFFD).
        for chunk in self.0.as_os_str().as_encoded_bytes().utf8_chunks() {
            let text = chunk.valid();
            if !text.chars().any(char::is_control) {
                f.write_str(text)?;
            } else {
                for c in text.chars() {
                    match c {
                        '\n' => f.write_str("\\n")?,
                        '\t' => f.write_str("\\t")?,
                        '\r' => f.write_str("\\r")?,
                        c if (c as u32) < 0x80 && c.is_control() => {
                            write!(f, "\\x{:02x}", c as u32)?;
                        }
                        c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
                        c => write!(f, "{c}")?,
                    }
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_paths_are_escaped() {
        assert_eq!(shown(Path::new("a/b.tar")).to_string(), "a/b.tar");
        assert_eq!(
            shown(Path::new("t/fake\n99\tx.txt")).to_string(),
            "t/fake\\n99\\tx.txt"
        );
        assert_eq!(shown(Path::new("\x1b[31m")).to_string(), "\\x1b[31m");
    }

    #[cfg(unix)]
    #[test]
    fn bytes_that_are_not_utf8_are_shown_as_hex() {
        use std::os::unix::ffi::OsStrExt;
        let name = |b: &[u8]| shown(Path::new(std::ffi::OsStr::from_bytes(b))).to_string();
        assert_eq!(name(b"d/caf\xe9.jpg"), "d/caf\\xe9.jpg");
        assert_ne!(name(b"caf\xe9"), name(b"caf\xe8"));
        assert_eq!(name(b"\xff\n\xfe"), "\\xff\\n\\xfe");
        assert_eq!(name("d/été.jpg".as_bytes()), "d/été.jpg");
    }
}
