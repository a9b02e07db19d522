//! `hopscore merge`: concatenates the outputs of `--shard i/N` runs, in shard order,
//! into one file (and their quarantine files into one), after checking that the
//! shards form a complete set from the same model, input and options.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::parse_shard;
use crate::io::parquet_io::sibling;
use crate::io::parts::concat_parquet;

const SHARD_KEY: &str = "hopscore.shard";

#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// Shard outputs (any order; each records its `i/N` in its metadata).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Merged output; the quarantine files are merged next to it.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Key-value metadata and schema of a Parquet file.
fn describe(path: &PathBuf) -> Result<(BTreeMap<String, String>, arrow::datatypes::SchemaRef)> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(
        File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
    )?;
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

/// Merges; returns the number of shards.
pub fn run(args: &MergeArgs) -> Result<usize> {
    let mut shards = BTreeMap::new();
    let mut reference: Option<BTreeMap<String, String>> = None;
    let mut schema = None;
    let mut count = None;
    for path in &args.inputs {
        let (mut kv, s) = describe(path)?;
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
        match &reference {
            None => reference = Some(kv.clone()),
            Some(r) if *r != kv => bail!(
                "{} was made with another model, input or options than {}",
                path.display(),
                args.inputs[0].display()
            ),
            Some(_) => {}
        }
        if shards.insert(shard.index, path.clone()).is_some() {
            bail!("shard {shard} is given twice");
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
    let mut metadata: Vec<(String, String)> = reference.unwrap_or_default().into_iter().collect();
    metadata.push((SHARD_KEY.to_string(), "all".to_string()));
    metadata.sort();
    let ordered: Vec<PathBuf> = shards.into_values().collect();
    concat_parquet(&ordered, &args.output, schema.expect("schema"), &metadata)?;
    let quarantines: Vec<PathBuf> = ordered.iter().map(|p| sibling(p, "quarantine")).collect();
    if quarantines.iter().all(|q| q.is_file()) {
        let (_, qschema) = describe(&quarantines[0])?;
        concat_parquet(
            &quarantines,
            &sibling(&args.output, "quarantine"),
            qschema,
            &metadata,
        )?;
    }
    Ok(n)
}
