//! Merging the outputs of `--shard i/N` runs (`hopscore merge`): concatenates the outputs of `--shard i/N` runs, in shard order,
//! into one file (and their quarantine files into one), after checking that the
//! shards form a complete set from the same model, input and options (compared by
//! content: [`crate::io::fingerprint`]) and that every shard has its quarantine file.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::io::atomic::commit_all;
use crate::io::fingerprint;
use crate::io::parquet_io::sibling;
use crate::io::parts::concat_parquet;
use crate::io::paths::{check_outputs, Kind, Named};
use crate::io::shard::parse_shard;

const SHARD_KEY: &str = "hopscore.shard";

/// Key-value metadata and schema of a Parquet file.
fn describe(path: &Path) -> Result<(BTreeMap<String, String>, arrow_schema::SchemaRef)> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(
        File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
    )
    .with_context(|| {
        format!(
            "{} is damaged or truncated (not a readable Parquet file)",
            path.display()
        )
    })?;
    let kv = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .map(|kvs| {
            kvs.iter()
                .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
                .collect()
        })
        .unwrap_or_default();
    Ok((kv, builder.schema().clone()))
}

/// The first column that differs between two shards' schemas, in words.
fn column_difference(
    a: &arrow_schema::Schema,
    b: &arrow_schema::Schema,
    a_path: &std::path::Path,
    b_path: &std::path::Path,
) -> Option<String> {
    let only = |x: &arrow_schema::Schema, y: &arrow_schema::Schema, p: &std::path::Path| {
        x.fields()
            .iter()
            .find(|f| y.field_with_name(f.name()).is_err())
            .map(|f| format!("column `{}` is only in {}", f.name(), p.display()))
    };
    let typed = a.fields().iter().find_map(|f| {
        let other = b.field_with_name(f.name()).ok()?;
        (other.data_type() != f.data_type()).then(|| {
            format!(
                "column `{}` is {} in one and {} in the other",
                f.name(),
                f.data_type(),
                other.data_type()
            )
        })
    });
    let order = (a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .any(|(x, y)| x.name() != y.name()))
    .then(|| "the same columns in another order".to_string());
    only(a, b, a_path)
        .or_else(|| only(b, a, b_path))
        .or(typed)
        .or(order)
}

/// Merges the shard outputs `inputs` (any order) into `output`, and their quarantine
/// files into `output`'s; returns the number of shards.
pub fn merge_shards(inputs: &[PathBuf], output: &Path) -> Result<usize> {
    let quarantine_output = sibling(output, "quarantine");
    let quarantines: Vec<PathBuf> = inputs.iter().map(|p| sibling(p, "quarantine")).collect();
    let named: Vec<Named> = inputs
        .iter()
        .map(|p| Named::new("shard", p))
        .chain(
            quarantines
                .iter()
                .map(|q| Named::new("shard quarantine file", q)),
        )
        .collect();
    check_outputs(
        &named,
        &[
            (Named::new("--output", output), Kind::File),
            (
                Named::new("the merged quarantine file", &quarantine_output),
                Kind::File,
            ),
        ],
    )?;
    for (shard, q) in inputs.iter().zip(&quarantines) {
        if !q.is_file() {
            bail!(
                "{} is missing: every shard's bad rows are in its quarantine file, so merging \
                 without it would lose them. Put it next to {} (or rerun that shard)",
                q.display(),
                shard.display()
            );
        }
    }
    let mut shards = BTreeMap::new();
    let mut reference: Option<BTreeMap<String, String>> = None;
    let mut metadata: Option<BTreeMap<String, String>> = None;
    let mut schema: Option<arrow_schema::SchemaRef> = None;
    let mut count = None;
    for (k, path) in inputs.iter().enumerate() {
        let (mut kv, s) = describe(path)?;
        // Each shard's own run; the merged file is none of them.
        kv.remove(crate::io::fingerprint::RUN_KEY);
        let shard = kv
            .remove(SHARD_KEY)
            .and_then(|v| parse_shard(&v).ok())
            .with_context(|| format!("{} is not the output of a --shard run", path.display()))?;
        if *count.get_or_insert(shard.count) != shard.count {
            bail!(
                "{} is shard {shard}, the others are of {} shards",
                path.display(),
                count.unwrap()
            );
        }
        let identity = fingerprint::identity(&kv.clone().into_iter().collect::<Vec<_>>());
        match &reference {
            None => reference = Some(identity),
            Some(r) if *r != identity => bail!(
                "{} was made with another model, input or options than {}: {}",
                path.display(),
                inputs[0].display(),
                fingerprint::diff(r, &identity).join("; ")
            ),
            Some(_) => {}
        }
        metadata.get_or_insert(kv);
        if shards.insert(shard.index, k).is_some() {
            bail!("shard {shard} is given twice");
        }
        if let Some(first) = &schema {
            if let Some(why) = column_difference(first.as_ref(), &s, &inputs[0], path) {
                bail!(
                    "{} has other columns than {}: {why}",
                    path.display(),
                    inputs[0].display()
                );
            }
        }
        schema.get_or_insert(s);
    }
    let n = count.expect("at least one input") as usize;
    if shards.len() != n {
        let missing: Vec<String> = (0..n as u64)
            .filter(|i| !shards.contains_key(i))
            .map(|i| format!("{i}/{n}"))
            .collect();
        bail!("missing shards: {}", missing.join(", "));
    }
    let mut metadata: Vec<(String, String)> = metadata.unwrap_or_default().into_iter().collect();
    metadata.push((SHARD_KEY.to_string(), "all".to_string()));
    metadata.sort();
    let order: Vec<usize> = shards.into_values().collect();
    let ordered: Vec<PathBuf> = order.iter().map(|&i| inputs[i].clone()).collect();
    let ordered_quarantines: Vec<PathBuf> = order.iter().map(|&i| quarantines[i].clone()).collect();
    let merged = concat_parquet(&ordered, output, schema.expect("schema"), &metadata)?;
    let (_, qschema) = describe(&ordered_quarantines[0])?;
    let merged_quarantine =
        concat_parquet(&ordered_quarantines, &quarantine_output, qschema, &metadata)?;
    commit_all([merged, merged_quarantine])?;
    Ok(n)
}
