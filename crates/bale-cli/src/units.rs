//! How the CLI writes sizes: binary units, `1.91 GiB` (rates stay in MB/s,
//! as disks and networks are quoted).

/// `n` bytes in binary units: `512 B`, `1.50 KiB`, `1.91 GiB`.
pub fn size(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(super::size(512), "512 B");
        assert_eq!(super::size(1536), "1.50 KiB");
        assert_eq!(super::size(2_050_000_000), "1.91 GiB");
    }
}
