//! Whether a copy fits: free space on the target, and available memory when
//! the copy goes to RAM. A pure function of the figures, which the caller
//! gathers (`statvfs`, `MemAvailable`) or assumes.

use std::path::Path;

use bale_format::shown;

use crate::error::{ReaderError, Result, StageErrorKind};

/// The fixed part of the margin kept free beyond the copy.
pub(crate) const MARGIN_BYTES: u64 = 64 << 20;

/// The figures a capacity check is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Bytes still to copy.
    pub to_copy: u64,
    /// Bytes free on the target's file system; `None` when not checked (a
    /// tmpfs about to be mounted with the size the copy needs).
    pub free: Option<u64>,
    /// Available memory (`MemAvailable`); `None` when the copy does not go to RAM.
    pub memory: Option<u64>,
    /// Copy to RAM even when memory is short (the excess goes to swap).
    pub allow_swap: bool,
}

/// `to_copy` with the margin: 5% + 64 MiB; `None` past 2^64.
pub(crate) fn required(to_copy: u64) -> Option<u64> {
    to_copy.checked_add(to_copy / 20)?.checked_add(MARGIN_BYTES)
}

/// Checks the figures for copying `src` into `target`; returns the bytes the
/// copy needs with its margin.
///
/// # Errors
/// [`ReaderError::Stage`]: [`StageErrorKind::BadManifest`] when the figures
/// pass 2^64, [`StageErrorKind::NoMemory`] (unless `allow_swap`), then
/// [`StageErrorKind::NoSpace`].
pub(crate) fn check(src: &Path, target: &Path, f: &Figures) -> Result<u64> {
    let Some(required) = required(f.to_copy) else {
        return Err(ReaderError::Stage {
            path: src.to_path_buf(),
            what: format!(
                "cannot stage {}: the copy would need {} bytes and a margin, more than 2^64",
                shown(src),
                f.to_copy
            ),
            kind: StageErrorKind::BadManifest,
        });
    };
    if let Some(available) = f.memory
        && required > available
        && !f.allow_swap
    {
        return Err(ReaderError::Stage {
            path: src.to_path_buf(),
            what: format!(
                "not enough memory to stage {} in RAM: the copy needs {}, plus a margin of {} (5% + 64 MiB) kept free: {} in all; the machine has {} available (MemAvailable)",
                shown(src),
                human_bytes(f.to_copy),
                human_bytes(required - f.to_copy),
                human_bytes(required),
                human_bytes(available)
            ),
            kind: StageErrorKind::NoMemory {
                needed: f.to_copy,
                required,
                available,
            },
        });
    }
    if let Some(free) = f.free
        && required > free
    {
        return Err(ReaderError::Stage {
            path: target.to_path_buf(),
            what: format!(
                "not enough space on {}: the copy needs {} ({} with a 5% + 64 MiB margin), the file system has {} free",
                shown(target),
                human_bytes(f.to_copy),
                human_bytes(required),
                human_bytes(free)
            ),
            kind: StageErrorKind::NoSpace {
                needed: f.to_copy,
                required,
                free,
            },
        });
    }
    Ok(required)
}

/// Bytes in binary units, two decimals past 1 KiB: `976.56 KiB`, `15 B`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn figures(to_copy: u64, free: Option<u64>, memory: Option<u64>) -> Figures {
        Figures {
            to_copy,
            free,
            memory,
            allow_swap: false,
        }
    }

    fn kind(r: Result<u64>) -> StageErrorKind {
        match r {
            Err(ReaderError::Stage { kind, .. }) => kind,
            other => panic!("expected a stage error, got {other:?}"),
        }
    }

    fn check_at(f: &Figures) -> Result<u64> {
        check(Path::new("/data/ds"), Path::new("/dev/shm/t"), f)
    }

    #[test]
    fn the_margin_is_five_percent_and_64_mib() {
        assert_eq!(required(0), Some(64 * MIB));
        assert_eq!(required(100 * MIB), Some(169 * MIB));
        assert_eq!(required(u64::MAX), None);
        assert_eq!(required(u64::MAX - 64 * MIB), None);
    }

    #[test]
    fn space_is_checked_with_the_margin() {
        let need = 100 * MIB;
        assert_eq!(
            check_at(&figures(need, Some(169 * MIB), None)).unwrap(),
            169 * MIB
        );
        // Room for the data, not for the margin.
        assert_eq!(
            kind(check_at(&figures(need, Some(169 * MIB - 1), None))),
            StageErrorKind::NoSpace {
                needed: need,
                required: 169 * MIB,
                free: 169 * MIB - 1
            }
        );
        let e = check_at(&figures(need, Some(1_000_000), None)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not enough space on /dev/shm/t: the copy needs 100.00 MiB (169.00 MiB with a 5% + 64 MiB margin), the file system has 976.56 KiB free"
        );
        // Not checked: a tmpfs about to be mounted with the needed size.
        assert!(check_at(&figures(need, None, None)).is_ok());
    }

    #[test]
    fn memory_is_checked_for_ram_and_states_its_figures() {
        let need = 100 * MIB;
        assert!(check_at(&figures(need, Some(u64::MAX), Some(169 * MIB))).is_ok());
        let e = check_at(&figures(need, Some(u64::MAX), Some(50_000_000))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not enough memory to stage /data/ds in RAM: the copy needs 100.00 MiB, plus a margin of 69.00 MiB (5% + 64 MiB) kept free: 169.00 MiB in all; the machine has 47.68 MiB available (MemAvailable)"
        );
        assert_eq!(
            kind(Err(e)),
            StageErrorKind::NoMemory {
                needed: need,
                required: 169 * MIB,
                available: 50_000_000
            }
        );
        // Memory short, and allowed to swap: then free space decides.
        let mut f = figures(need, Some(u64::MAX), Some(1));
        f.allow_swap = true;
        assert_eq!(check_at(&f).unwrap(), 169 * MIB);
        f.free = Some(1);
        assert!(matches!(kind(check_at(&f)), StageErrorKind::NoSpace { .. }));
    }

    #[test]
    fn sizes_past_2_pow_64_are_refused_not_wrapped() {
        for to_copy in [
            u64::MAX,
            u64::MAX - 64 * MIB,
            u64::MAX / 20 * 19 + u64::MAX / 40,
        ] {
            let e = check_at(&figures(to_copy, Some(u64::MAX), Some(u64::MAX))).unwrap_err();
            assert!(e.to_string().contains("more than 2^64"), "{e}");
            assert_eq!(kind(Err(e)), StageErrorKind::BadManifest);
        }
    }

    #[test]
    fn human_bytes_matches_the_progress_bars() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1500), "1.46 KiB");
        assert_eq!(human_bytes(1_000_000), "976.56 KiB");
        assert_eq!(human_bytes(50_000_000), "47.68 MiB");
        assert_eq!(human_bytes(1_500_000_000), "1.40 GiB");
        assert_eq!(human_bytes(u64::MAX), "16.00 EiB");
    }
}
