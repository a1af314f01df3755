//! Fuzzes the readers of MosaicML Streaming (MDS) and LitData datasets
//! (`bale_format::foreign`, what `bale convert` reads): an `index.json` and
//! the bytes of its first shard, split by the input's first two bytes (the
//! length of the JSON). Every outcome is an error naming a file or a list
//! of samples whose members all carry valid extensions; never a panic, and
//! never an allocation a size field asks for without the bytes behind it.
#![no_main]

use bale_format::fuzzing::check_foreign;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let split = (usize::from(u16::from_le_bytes([data[0], data[1]]))).min(data.len() - 2);
    let (index, shard) = data[2..].split_at(split);
    match check_foreign(index, shard) {
        Err(e) => assert!(e.to_string().contains("fuzz/"), "error names no file: {e}"),
        Ok(samples) => {
            for (key, members) in samples {
                assert!(!key.is_empty());
                for (ext, _) in members {
                    bale_format::validate_ext(&ext).expect("extensions are checked");
                }
            }
        }
    }
});
