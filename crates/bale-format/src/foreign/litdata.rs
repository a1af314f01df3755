//! LitData's `index.json` (`litdata.optimize`, PyTreeLoader chunks).

use std::path::Path;

use serde_json::Value as Json;

use super::values::lit_column;
use super::{Column, ForeignError, ShardSpec, json_u64, shard_path};

/// The field names of the pytree `data_spec` describes: a dict's keys, a
/// list or tuple's positions, or `data` for a single leaf. Nested trees
/// are refused.
fn field_names(config: &Json) -> Result<Vec<String>, ForeignError> {
    let text = config
        .get("data_spec")
        .and_then(Json::as_str)
        .ok_or_else(|| ForeignError("config.data_spec is missing".into()))?;
    let spec: Json = serde_json::from_str(text)
        .map_err(|e| ForeignError(format!("config.data_spec is not JSON: {e}")))?;
    let tree = spec
        .get(1)
        .ok_or_else(|| ForeignError("config.data_spec is not [version, tree]".into()))?;
    let is_leaf = |t: &Json| {
        t.get("type").is_some_and(Json::is_null)
            && t.get("children_spec")
                .and_then(Json::as_array)
                .is_some_and(Vec::is_empty)
    };
    if is_leaf(tree) {
        return Ok(vec!["data".into()]);
    }
    let kind = tree.get("type").and_then(Json::as_str).unwrap_or("");
    let children = tree
        .get("children_spec")
        .and_then(Json::as_array)
        .ok_or_else(|| ForeignError("config.data_spec has no children_spec".into()))?;
    if !children.iter().all(is_leaf) {
        return Err(ForeignError(
            "the items are nested (a dict or list inside an item): bale maps flat items, one member per field".into(),
        ));
    }
    match kind {
        "builtins.dict" => {
            let keys: Vec<Json> = tree
                .get("context")
                .and_then(Json::as_str)
                .and_then(|c| serde_json::from_str(c).ok())
                .ok_or_else(|| {
                    ForeignError("config.data_spec: the dict's keys are not readable".into())
                })?;
            let keys: Option<Vec<String>> = keys
                .into_iter()
                .map(|k| match k {
                    Json::String(s) => Some(s),
                    Json::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .collect();
            let keys = keys.ok_or_else(|| {
                ForeignError("config.data_spec: a dict key is not a string or number".into())
            })?;
            if keys.len() != children.len() {
                return Err(ForeignError(format!(
                    "config.data_spec: {} keys for {} fields",
                    keys.len(),
                    children.len()
                )));
            }
            Ok(keys)
        }
        "builtins.list" | "builtins.tuple" => {
            Ok((0..children.len()).map(|i| i.to_string()).collect())
        }
        other => Err(ForeignError(format!(
            "config.data_spec: items of type {other:?} (bale maps dicts, lists, tuples and single values)"
        ))),
    }
}

/// The columns and chunks `index.json` describes.
pub(crate) fn parse_index(
    dir: &Path,
    json: &Json,
) -> Result<(Vec<Column>, Vec<ShardSpec>), ForeignError> {
    let config = json
        .get("config")
        .filter(|c| c.is_object())
        .ok_or_else(|| ForeignError("\"config\" is missing".into()))?;
    let loader = config
        .get("item_loader")
        .and_then(Json::as_str)
        .unwrap_or("");
    if loader != "PyTreeLoader" {
        return Err(ForeignError(format!(
            "item_loader is {loader:?}: bale reads LitData's PyTreeLoader chunks (not token or arrow chunks)"
        )));
    }
    if !config.get("encryption").is_none_or(Json::is_null) {
        return Err(ForeignError(
            "the chunks are encrypted: bale cannot read them".into(),
        ));
    }
    let compression = config.get("compression").and_then(Json::as_str);
    let level = config.get("compression_level").and_then(Json::as_str);
    let zstd = match (compression, level) {
        (None, _) => false,
        (Some(c), None | Some("chunk")) if c == "zstd" || c.starts_with("zstd:") => true,
        (Some(c), level) => {
            return Err(ForeignError(format!(
                "chunks compressed with {c:?} at compression_level {:?}: bale reads uncompressed chunks and whole-chunk zstd; optimize again with compression_level=\"chunk\" (or no compression)",
                level.unwrap_or("batch")
            )));
        }
    };
    let formats: Vec<String> = config
        .get("data_format")
        .and_then(Json::as_array)
        .and_then(|a| a.iter().map(|v| v.as_str().map(str::to_owned)).collect())
        .ok_or_else(|| {
            ForeignError("config.data_format is missing or not a list of strings".into())
        })?;
    let names = field_names(config)?;
    if names.len() != formats.len() {
        return Err(ForeignError(format!(
            "config.data_spec has {} fields, config.data_format {} types",
            names.len(),
            formats.len()
        )));
    }
    let mut columns = Vec::with_capacity(names.len());
    for (name, format) in names.into_iter().zip(formats) {
        let (ext, value) = lit_column(&name, &format)?;
        columns.push(Column {
            name,
            encoding: format,
            ext,
            // LitData writes every field's size, fixed or not.
            fixed: None,
            value,
        });
    }
    let list = json
        .get("chunks")
        .and_then(Json::as_array)
        .ok_or_else(|| ForeignError("\"chunks\" is not a list".into()))?;
    let mut shards = Vec::with_capacity(list.len().min(1 << 16));
    for (i, chunk) in list.iter().enumerate() {
        let what = format!("chunk {i}");
        let name = chunk
            .get("filename")
            .and_then(Json::as_str)
            .ok_or_else(|| ForeignError(format!("{what}: \"filename\" is missing")))?;
        shards.push(ShardSpec {
            path: shard_path(dir, name)?,
            zstd,
            raw_bytes: Some(json_u64(chunk, "chunk_bytes", &what)?),
            samples: json_u64(chunk, "chunk_size", &what)?,
            has_config: false,
        });
    }
    Ok((columns, shards))
}
