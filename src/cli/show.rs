//! `hopscore show`: prints the rows (and run metadata) of any Parquet file hopscore
//! reads or writes, as a table.

use std::path::PathBuf;

use anyhow::{Context, Result};
use arrow_array::RecordBatch;
use clap::Args;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// A Parquet file (questions, chains, scores, quarantine).
    pub file: PathBuf,
    /// Rows to print from the start of the file.
    #[arg(long, default_value_t = 20)]
    pub rows: usize,
    /// Only these columns (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub columns: Vec<String>,
    /// Also print the `hopscore.*` key-value metadata (model checksum, options).
    #[arg(long)]
    pub metadata: bool,
}

/// The table (and metadata) as text.
pub fn run(args: &ShowArgs) -> Result<String> {
    let file = std::fs::File::open(&args.file)
        .with_context(|| format!("cannot open {}", args.file.display()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{} is not a Parquet file", args.file.display()))?;
    let total = builder.metadata().file_metadata().num_rows();
    let mut out = String::new();
    if args.metadata {
        for kv in builder
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .into_iter()
            .flatten()
            .filter(|kv| kv.key.starts_with("hopscore."))
        {
            out.push_str(&format!(
                "{} = {}\n",
                kv.key,
                kv.value.as_deref().unwrap_or("")
            ));
        }
    }
    let builder = if args.columns.is_empty() {
        builder
    } else {
        let schema = builder.parquet_schema();
        let indices = args
            .columns
            .iter()
            .map(|c| {
                builder
                    .schema()
                    .index_of(c)
                    .map_err(|_| anyhow::anyhow!("no column `{c}` in {}", args.file.display()))
            })
            .collect::<Result<Vec<_>>>()?;
        let mask = ProjectionMask::roots(schema, indices);
        builder.with_projection(mask)
    };
    let mut batches: Vec<RecordBatch> = builder
        .with_limit(args.rows)
        .build()?
        .collect::<Result<_, _>>()?;
    if !args.columns.is_empty() {
        // The projection reads in file order; print in the order asked.
        batches = batches
            .iter()
            .map(|b| {
                let order = args
                    .columns
                    .iter()
                    .map(|c| b.schema().index_of(c))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(b.project(&order)?)
            })
            .collect::<Result<_>>()?;
    }
    out.push_str(&arrow_cast::pretty::pretty_format_batches(&batches)?.to_string());
    out.push_str(&format!(
        "\n{} of {total} rows\n",
        batches.iter().map(RecordBatch::num_rows).sum::<usize>()
    ));
    Ok(out)
}
