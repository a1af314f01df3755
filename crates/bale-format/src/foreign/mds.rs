//! MosaicML Streaming's `index.json` (format `mds`, version 2).

use std::path::Path;

use serde_json::Value as Json;

use super::values::{Value, mds_column};
use super::{Column, ForeignError, ShardSpec, json_u64, shard_path};

/// The column names, types and fixed sizes of a shard.
type Layout = (Vec<String>, Vec<String>, Vec<Option<u64>>);

fn strings(shard: &Json, field: &str, i: usize) -> Result<Vec<String>, ForeignError> {
    shard
        .get(field)
        .and_then(Json::as_array)
        .and_then(|a| a.iter().map(|v| v.as_str().map(str::to_owned)).collect())
        .ok_or_else(|| {
            ForeignError(format!(
                "shard {i}: \"{field}\" is missing or not a list of strings"
            ))
        })
}

/// The columns and shards `index.json` describes.
pub(crate) fn parse_index(
    dir: &Path,
    json: &Json,
) -> Result<(Vec<Column>, Vec<ShardSpec>), ForeignError> {
    let list = json
        .get("shards")
        .and_then(Json::as_array)
        .ok_or_else(|| ForeignError("\"shards\" is not a list".into()))?;
    let mut columns: Option<Layout> = None;
    let mut shards = Vec::with_capacity(list.len().min(1 << 16));
    for (i, shard) in list.iter().enumerate() {
        let format = shard.get("format").and_then(Json::as_str).unwrap_or("");
        if format != "mds" {
            return Err(ForeignError(format!(
                "shard {i} has format {format:?}: bale reads MosaicML Streaming's \"mds\" shards (not xsv or json)"
            )));
        }
        let version = shard.get("version").and_then(Json::as_u64);
        if version != Some(2) {
            return Err(ForeignError(format!(
                "shard {i} has version {version:?}: bale reads MDS version 2"
            )));
        }
        let names = strings(shard, "column_names", i)?;
        let encodings = strings(shard, "column_encodings", i)?;
        let sizes: Vec<Option<u64>> = shard
            .get("column_sizes")
            .and_then(Json::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|v| {
                        if v.is_null() {
                            Some(None)
                        } else {
                            v.as_u64().map(Some)
                        }
                    })
                    .collect()
            })
            .ok_or_else(|| {
                ForeignError(format!(
                    "shard {i}: \"column_sizes\" is missing or not a list of sizes"
                ))
            })?;
        if names.len() != encodings.len() || names.len() != sizes.len() || names.is_empty() {
            return Err(ForeignError(format!(
                "shard {i}: {} column names, {} encodings and {} sizes",
                names.len(),
                encodings.len(),
                sizes.len()
            )));
        }
        let these = (names, encodings, sizes);
        match &columns {
            None => columns = Some(these),
            Some(c) if *c == these => {}
            Some(_) => {
                return Err(ForeignError(format!(
                    "shard {i} has other columns than shard 0 (bale converts one column layout)"
                )));
            }
        }
        let what = format!("shard {i}");
        let samples = json_u64(shard, "samples", &what)?;
        let raw = shard
            .get("raw_data")
            .filter(|v| v.is_object())
            .ok_or_else(|| ForeignError(format!("{what}: \"raw_data\" is missing")))?;
        let raw_name = raw
            .get("basename")
            .and_then(Json::as_str)
            .ok_or_else(|| ForeignError(format!("{what}: \"raw_data.basename\" is missing")))?;
        let raw_path = shard_path(dir, raw_name)?;
        let raw_bytes = json_u64(raw, "bytes", &format!("{what} raw_data"))?;
        let compression = shard.get("compression").and_then(Json::as_str);
        let spec = match compression {
            // A compressed shard's decompressed copy (which Streaming
            // leaves beside it when it reads the shard) serves as well.
            None => ShardSpec {
                path: raw_path,
                zstd: false,
                raw_bytes: Some(raw_bytes),
                samples,
                has_config: true,
            },
            Some(_) if std::fs::symlink_metadata(&raw_path).is_ok() => ShardSpec {
                path: raw_path,
                zstd: false,
                raw_bytes: Some(raw_bytes),
                samples,
                has_config: true,
            },
            Some(c) if c == "zstd" || c.starts_with("zstd:") => {
                let zip = shard
                    .get("zip_data")
                    .and_then(|z| z.get("basename"))
                    .and_then(Json::as_str)
                    .ok_or_else(|| {
                        ForeignError(format!("{what}: \"zip_data.basename\" is missing"))
                    })?;
                ShardSpec {
                    path: shard_path(dir, zip)?,
                    zstd: true,
                    raw_bytes: Some(raw_bytes),
                    samples,
                    has_config: true,
                }
            }
            Some(c) => {
                return Err(ForeignError(format!(
                    "{what} is compressed with {c:?}: bale decompresses zstd only; rewrite the dataset with compression='zstd' or none, or let Streaming decompress it ({raw_name} beside the shard is read as is)"
                )));
            }
        };
        shards.push(spec);
    }
    let Some((names, encodings, sizes)) = columns else {
        return Ok((Vec::new(), shards));
    };
    let mut out = Vec::with_capacity(names.len());
    for ((name, encoding), size) in names.into_iter().zip(encodings).zip(sizes) {
        let (ext, value) = mds_column(&name, &encoding)?;
        let natural = natural_size(&value);
        let fixed = match (size, natural) {
            (Some(s), Some(n)) if s == n => Some(s as u32),
            (None, None) => None,
            // A static ndarray (dtype and shape in its type) has a fixed size too.
            (Some(s), None)
                if matches!(
                    value,
                    Value::MdsArray {
                        dtype: Some(_),
                        shape: Some(_)
                    }
                ) && s <= u64::from(u32::MAX) =>
            {
                Some(s as u32)
            }
            _ => {
                return Err(ForeignError(format!(
                    "column {name:?} ({encoding}) records size {size:?}, its type has {natural:?}"
                )));
            }
        };
        out.push(Column {
            name,
            encoding,
            ext,
            fixed,
            value,
        });
    }
    Ok((out, shards))
}

/// Bytes of every value of a fixed-size type.
fn natural_size(v: &Value) -> Option<u64> {
    match v {
        Value::Int { size, .. } | Value::Float { size } => Some(u64::from(*size)),
        Value::Bool => Some(1),
        _ => None,
    }
}
