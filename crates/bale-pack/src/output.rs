//! The output directory: checked before a pack, cleaned up after a failure.

use std::fs;
use std::path::{Path, PathBuf};

use bale_format::MANIFEST_NAME;
use bale_format::atomic::TEMP_PREFIX;

use crate::error::{PackError, Result};

/// Whether `name` is a file bale writes into a dataset directory: the
/// manifest, a shard or index (`shard-*` / `part-*`), or a temporary file.
pub fn is_bale_file_name(name: &str) -> bool {
    name == MANIFEST_NAME
        || name.starts_with(TEMP_PREFIX)
        || ((name.starts_with("shard-") || name.starts_with("part-"))
            && (name.ends_with(".tar")
                || name.ends_with(".tar.zst")
                || name.ends_with(".h5")
                || name.ends_with(".idx")))
}

/// An output directory being written. Dropped without [`Output::commit`], it
/// removes every file this run put in place and, if this run created the
/// directory, the directory (when empty).
#[derive(Debug)]
pub(crate) struct Output {
    pub dir: PathBuf,
    created: bool,
    files: Vec<PathBuf>,
    committed: bool,
}

impl Output {
    /// Creates `dir` if needed; refuses a non-empty one unless `force`, in
    /// which case the old manifest and then every file named like bale's
    /// output are removed first (other files are left alone).
    pub fn prepare(dir: &Path, force: bool) -> Result<Self> {
        let created = match fs::metadata(dir) {
            Ok(m) if m.is_dir() => false,
            Ok(_) => {
                return Err(PackError::Option(format!(
                    "output {} exists and is not a directory",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(|e| PackError::io(dir, e))?;
                true
            }
            Err(e) => return Err(PackError::io(dir, e)),
        };
        if !created {
            let mut names = Vec::new();
            for entry in fs::read_dir(dir).map_err(|e| PackError::io(dir, e))? {
                let entry = entry.map_err(|e| PackError::io(dir, e))?;
                names.push(entry.file_name());
            }
            if !names.is_empty() {
                if !force {
                    return Err(PackError::OutputNotEmpty {
                        dir: dir.to_path_buf(),
                    });
                }
                // The manifest first: from here on the directory is not a dataset.
                let manifest = dir.join(MANIFEST_NAME);
                match fs::remove_file(&manifest) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(PackError::io(manifest, e)),
                }
                for n in names {
                    if n.to_str().is_some_and(is_bale_file_name) {
                        let p = dir.join(&n);
                        if p.is_file() {
                            fs::remove_file(&p).map_err(|e| PackError::io(&p, e))?;
                        }
                    }
                }
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            created,
            files: Vec::new(),
            committed: false,
        })
    }

    /// Records a file this run put in place, to remove on failure.
    pub fn track(&mut self, path: PathBuf) {
        self.files.push(path);
    }

    /// The run succeeded: keep everything.
    pub fn commit(mut self) {
        self.committed = true;
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for f in self.files.iter().rev() {
            let _ = fs::remove_file(f);
        }
        if self.created {
            let _ = fs::remove_dir(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_empty_output_and_force_clears_bale_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        fs::create_dir(&out).unwrap();
        for n in [
            "bale.json",
            "shard-000003.tar",
            "shard-000003.idx",
            "notes.txt",
        ] {
            fs::write(out.join(n), b"x").unwrap();
        }
        let err = Output::prepare(&out, false).unwrap_err();
        assert!(matches!(err, PackError::OutputNotEmpty { .. }), "{err}");
        assert!(out.join("bale.json").exists());
        let o = Output::prepare(&out, true).unwrap();
        o.commit();
        let mut left: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["notes.txt"]);
    }

    #[test]
    fn a_failed_run_removes_its_files_and_the_directory_it_made() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new");
        let mut o = Output::prepare(&out, false).unwrap();
        fs::write(out.join("shard-000000.tar"), b"x").unwrap();
        o.track(out.join("shard-000000.tar"));
        drop(o);
        assert!(!out.exists());
    }
}
