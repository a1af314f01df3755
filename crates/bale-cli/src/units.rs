//! How the CLI writes sizes, rates and counts: binary units throughout, so
//! that one line never mixes families (`1.91 GiB` with `112.4 MiB/s`, never
//! with `MB/s`), and counts with the noun in the right number (`1 shard`,
//! `2 shards`).

/// `n` bytes in binary units: `512 B`, `1.50 KiB`, `1.91 GiB`.
pub fn size(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}

/// `bytes_per_sec` in MiB/s with one decimal: `112.4 MiB/s`.
pub fn mib_per_sec(bytes_per_sec: f64) -> String {
    format!("{:.1} MiB/s", bytes_per_sec / (1024.0 * 1024.0))
}

/// A count of things: the integer types the commands count with.
pub trait Count: Copy + std::fmt::Display {
    /// Whether the count is one (the noun stays singular).
    fn is_one(self) -> bool;
}

impl Count for u64 {
    fn is_one(self) -> bool {
        self == 1
    }
}

impl Count for usize {
    fn is_one(self) -> bool {
        self == 1
    }
}

impl Count for u32 {
    fn is_one(self) -> bool {
        self == 1
    }
}

/// `n` and the noun, made plural by adding `s` unless `n` is 1: `1 shard`,
/// `0 shards`, `3 DALI index files` (from `"DALI index file"`).
pub fn count(n: impl Count, noun: &str) -> String {
    if n.is_one() {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `n` and `one` or `many`, for nouns whose plural is not `noun` + `s`:
/// `count_irregular(1, "class", "classes")` is `1 class`.
pub fn count_irregular(n: impl Count, one: &str, many: &str) -> String {
    if n.is_one() {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(super::size(512), "512 B");
        assert_eq!(super::size(1536), "1.50 KiB");
        assert_eq!(super::size(2_050_000_000), "1.91 GiB");
    }

    #[test]
    fn rates_use_binary_units_too() {
        assert_eq!(super::mib_per_sec(1024.0 * 1024.0 * 1.5), "1.5 MiB/s");
        assert_eq!(super::mib_per_sec(0.0), "0.0 MiB/s");
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(super::count(1u64, "shard"), "1 shard");
        assert_eq!(super::count(0u64, "shard"), "0 shards");
        assert_eq!(super::count(2u64, "DALI index file"), "2 DALI index files");
        assert_eq!(super::count_irregular(1u64, "class", "classes"), "1 class");
        assert_eq!(
            super::count_irregular(3u64, "class", "classes"),
            "3 classes"
        );
    }
}
