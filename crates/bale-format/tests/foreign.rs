//! The MDS and LitData readers (`bale_format::foreign`): what a writer of
//! those formats puts in comes back out, and damaged or arbitrary bytes are
//! errors that name the file, never a panic or an allocation a size field
//! asks for.

use bale_format::fuzzing::read_foreign;
use proptest::prelude::*;

/// An MDS `index.json` of one shard with the columns `cls` (int), `txt`
/// (str) and `raw` (bytes).
fn mds_index(bytes: usize, samples: usize) -> Vec<u8> {
    format!(
        r#"{{"shards":[{{"column_encodings":["int","bytes","str"],"column_names":["cls","raw","txt"],"column_sizes":[8,null,null],"compression":null,"format":"mds","hashes":[],"raw_data":{{"basename":"shard.00000.mds","bytes":{bytes},"hashes":{{}}}},"samples":{samples},"size_limit":67108864,"version":2,"zip_data":null}}],"version":2}}"#
    )
    .into_bytes()
}

/// The MDS shard of `samples` `(cls, raw, txt)`, as `MDSWriter` lays it out.
fn mds_shard(samples: &[(i64, Vec<u8>, String)]) -> Vec<u8> {
    let encoded: Vec<Vec<u8>> = samples
        .iter()
        .map(|(cls, raw, txt)| {
            let mut s = Vec::new();
            s.extend_from_slice(&(raw.len() as u32).to_le_bytes());
            s.extend_from_slice(&(txt.len() as u32).to_le_bytes());
            s.extend_from_slice(&cls.to_le_bytes());
            s.extend_from_slice(raw);
            s.extend_from_slice(txt.as_bytes());
            s
        })
        .collect();
    let config = br#"{"columns":"..."}"#;
    let mut at = (4 + 4 * (encoded.len() + 1) + config.len()) as u32;
    let mut out = (encoded.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&at.to_le_bytes());
    for s in &encoded {
        at += s.len() as u32;
        out.extend_from_slice(&at.to_le_bytes());
    }
    out.extend_from_slice(config);
    for s in &encoded {
        out.extend_from_slice(s);
    }
    out
}

fn samples() -> impl Strategy<Value = Vec<(i64, Vec<u8>, String)>> {
    prop::collection::vec(
        (
            any::<i64>(),
            prop::collection::vec(any::<u8>(), 0..40),
            "[a-z ✓]{0,12}",
        ),
        0..12,
    )
}

fn assert_names_a_file(e: &bale_format::FormatError) {
    let text = e.to_string();
    assert!(text.contains("fuzz/"), "error names no file: {text}");
}

proptest! {
    #[test]
    fn mds_samples_come_back_as_members(samples in samples()) {
        let shard = mds_shard(&samples);
        let got = read_foreign(&mds_index(shard.len(), samples.len()), &shard).unwrap();
        prop_assert_eq!(got.len(), samples.len());
        for (i, ((key, members), (cls, raw, txt))) in got.iter().zip(&samples).enumerate() {
            prop_assert_eq!(key, &format!("{i:08}"));
            let want: Vec<(String, Vec<u8>)> = vec![
                ("cls".into(), cls.to_string().into_bytes()),
                ("raw".into(), raw.clone()),
                ("txt".into(), txt.clone().into_bytes()),
            ];
            prop_assert_eq!(members, &want);
        }
    }

    #[test]
    fn damaged_mds_shards_are_errors_never_panics(
        samples in samples(),
        cut in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut shard = mds_shard(&samples);
        let len = shard.len();
        for (at, v) in flips {
            let i = at.index(len);
            shard[i] = v;
        }
        shard.truncate(cut.index(len + 1));
        if let Err(e) = read_foreign(&mds_index(len, samples.len()), &shard) {
            assert_names_a_file(&e);
        }
    }

    #[test]
    fn arbitrary_shard_bytes_are_errors_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        claimed in any::<u32>(),
    ) {
        // Also a count near the top of u32, which must not be allocated.
        for n in [u64::from(claimed), u64::from(u32::MAX), 3] {
            let index = mds_index(bytes.len(), n as usize);
            if let Err(e) = read_foreign(&index, &bytes) {
                assert_names_a_file(&e);
            }
        }
    }

    #[test]
    fn arbitrary_index_json_is_an_error_never_a_panic(text in ".{0,300}") {
        if let Err(e) = read_foreign(text.as_bytes(), b"") {
            assert_names_a_file(&e);
        }
    }

    /// With or without the Arrow IPC copy of the rows LitData may append
    /// (`<IPC file> <u32 length> "LDARW01\0"`), the samples are the same.
    #[test]
    fn litdata_items_come_back_as_members(items in prop::collection::vec((any::<i64>(), any::<f64>(), prop::collection::vec(any::<f32>(), 0..5)), 0..10), footer in prop::option::of(prop::collection::vec(any::<u8>(), 0..64))) {
        let index = br#"{"chunks":[{"chunk_bytes":CHUNK,"chunk_size":COUNT,"dim":null,"filename":"chunk-0-0.bin"}],"config":{"compression":null,"data_format":["int","float","no_header_numpy:9"],"data_spec":"[1, {\"type\": \"builtins.dict\", \"context\": \"[\\\"label\\\", \\\"score\\\", \\\"vec\\\"]\", \"children_spec\": [{\"type\": null, \"context\": null, \"children_spec\": []}, {\"type\": null, \"context\": null, \"children_spec\": []}, {\"type\": null, \"context\": null, \"children_spec\": []}]}]","encryption":null,"item_loader":"PyTreeLoader"}}"#;
        let encoded: Vec<Vec<u8>> = items.iter().map(|(l, s, v)| {
            let mut out = Vec::new();
            for n in [8u32, 8, 4 * v.len() as u32] {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.extend_from_slice(&l.to_le_bytes());
            out.extend_from_slice(&s.to_le_bytes());
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
            out
        }).collect();
        let mut at = (4 * (encoded.len() + 2)) as u32;
        let mut chunk = (encoded.len() as u32).to_le_bytes().to_vec();
        chunk.extend_from_slice(&at.to_le_bytes());
        for e in &encoded {
            at += e.len() as u32;
            chunk.extend_from_slice(&at.to_le_bytes());
        }
        for e in &encoded {
            chunk.extend_from_slice(e);
        }
        if let Some(ipc) = &footer {
            arrow_footer(&mut chunk, ipc);
        }
        let index = String::from_utf8_lossy(index)
            .replace("CHUNK", &chunk.len().to_string())
            .replace("COUNT", &items.len().to_string());
        let got = read_foreign(index.as_bytes(), &chunk).unwrap();
        prop_assert_eq!(got.len(), items.len());
        for ((_, members), (l, s, v)) in got.iter().zip(&items) {
            prop_assert_eq!(&members[0], &("label".to_string(), l.to_string().into_bytes()));
            prop_assert_eq!(members[1].0.as_str(), "score");
            let back: f64 = std::str::from_utf8(&members[1].1).unwrap().parse().unwrap();
            prop_assert!(back == *s || (back.is_nan() && s.is_nan()));
            prop_assert_eq!(members[2].0.as_str(), "vec.npy");
            let h = bale_format::npy::parse(&members[2].1).unwrap();
            prop_assert_eq!(h.data_len(), Some(4 * v.len() as u64));
        }
    }
}

/// Appends LitData's Arrow footer of IPC bytes `ipc` to `chunk`.
fn arrow_footer(chunk: &mut Vec<u8>, ipc: &[u8]) {
    chunk.extend_from_slice(ipc);
    chunk.extend_from_slice(&(ipc.len() as u32).to_le_bytes());
    chunk.extend_from_slice(b"LDARW01\0");
}

/// A chunk whose rows are only in the Arrow footer (every sample empty, as
/// LitData writes dicts of strings and numbers) is refused by name, not
/// called corrupt, and a footer whose length does not match the samples'
/// end still is.
#[test]
fn litdata_rows_only_in_arrow_are_refused_by_name() {
    let index = |bytes: usize| {
        format!(
            r#"{{"chunks":[{{"chunk_bytes":{bytes},"chunk_size":3,"dim":null,"filename":"chunk-0-0.bin"}}],"config":{{"compression":null,"data_format":["int","str"],"data_spec":"[1, {{\"type\": \"builtins.dict\", \"context\": \"[\\\"label\\\", \\\"caption\\\"]\", \"children_spec\": [{{\"type\": null, \"context\": null, \"children_spec\": []}}, {{\"type\": null, \"context\": null, \"children_spec\": []}}]}}]","encryption":null,"item_loader":"PyTreeLoader"}}}}"#
        )
    };
    let header = 4 * (3 + 2) as u32;
    let mut chunk = 3u32.to_le_bytes().to_vec();
    for _ in 0..4 {
        chunk.extend_from_slice(&header.to_le_bytes());
    }
    arrow_footer(&mut chunk, b"ARROW1\0\0 stands for the IPC file");
    let e = read_foreign(index(chunk.len()).as_bytes(), &chunk).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, bale_format::FormatError::Unsupported { .. }),
        "{e:?}"
    );
    assert!(
        msg.contains("Arrow") && msg.contains("chunk-0-0.bin"),
        "{msg}"
    );
    assert!(msg.contains(&format!("offset {header}")), "{msg}");
    // One byte more in the footer's length field: no longer LitData's layout.
    let n = chunk.len();
    chunk[n - 12] += 1;
    let e = read_foreign(index(chunk.len()).as_bytes(), &chunk).unwrap_err();
    assert!(
        matches!(e, bale_format::FormatError::Corrupt { .. }),
        "{e:?}"
    );
}
