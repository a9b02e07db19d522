//! The files of the review job: the chains it starts from (a `hopscore beam` output)
//! and its output rows as record batches ([`crate::io::schemas::review_schema`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{Int32Builder, ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field};

use crate::io::parquet_io::{string_column, ParquetInput};
use crate::io::schemas::review_schema;
use crate::post::CallStats;

/// One output row: a reviewed question.
#[derive(Debug, Clone)]
pub struct ReviewRow {
    pub id: String,
    /// `None`: the question failed (`failure` says why).
    pub answer: Option<String>,
    pub failure: Option<String>,
    /// Evidence as passage indices (empty with a corpus).
    pub chain: Vec<usize>,
    pub titles: Vec<String>,
    /// Evidence as corpus ids (empty without a corpus).
    pub corpus_ids: Vec<String>,
    /// The search trace (JSON).
    pub trace: String,
    pub stats: CallStats,
    pub parse_failures: Vec<String>,
}

/// `id` → chain (passage indices) of a `hopscore beam` output.
pub fn read_chains(path: &Path) -> Result<HashMap<String, Vec<usize>>> {
    let mut input = ParquetInput::open(path, 1024)
        .with_context(|| format!("reading the chains {}", path.display()))?;
    input.check_column("id", &["string"], true)?;
    let as_list = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
    let mut out = HashMap::new();
    for batch in input.by_ref() {
        let batch = batch?;
        if let Some(bad) = batch.bad.first() {
            bail!("{} row {}: {}", path.display(), bad.row, bad.reason);
        }
        let batch = batch.batch;
        let ids = string_column(&batch, "id")?;
        let col = batch.column_by_name("chain").with_context(|| {
            format!(
                "{} has no column `chain` (write it with `hopscore beam`)",
                path.display()
            )
        })?;
        let chains = arrow_cast::cast(col, &as_list).with_context(|| {
            format!(
                "column `chain` of {} is not a list of integers",
                path.display()
            )
        })?;
        let chains = chains.as_list::<i32>();
        for r in 0..batch.num_rows() {
            if ids.is_null(r) || chains.is_null(r) {
                continue;
            }
            let values = chains.value(r);
            let values = values.as_primitive::<Int64Type>();
            if values.null_count() > 0 || values.values().iter().any(|&v| v < 0) {
                bail!(
                    "{}: the chain of {} holds a null or negative index",
                    path.display(),
                    ids.value(r)
                );
            }
            out.insert(
                ids.value(r).to_string(),
                values.values().iter().map(|&v| v as usize).collect(),
            );
        }
    }
    Ok(out)
}

/// The record batch of `rows` in the [`review_schema`] layout.
pub fn review_batch(rows: &[ReviewRow]) -> Result<RecordBatch> {
    let strings = |f: &dyn Fn(&ReviewRow) -> &[String]| {
        let mut b = ListBuilder::new(StringBuilder::new());
        for r in rows {
            f(r).iter().for_each(|s| b.values().append_value(s));
            b.append(true);
        }
        Arc::new(b.finish()) as ArrayRef
    };
    let mut chain = ListBuilder::new(Int32Builder::new());
    for r in rows {
        r.chain
            .iter()
            .for_each(|&i| chain.values().append_value(i as i32));
        chain.append(true);
    }
    let u32s = |f: &dyn Fn(&ReviewRow) -> u32| {
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(f))) as ArrayRef
    };
    let u64s = |f: &dyn Fn(&ReviewRow) -> u64| {
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(f))) as ArrayRef
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.id.as_str()),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.answer.as_deref()),
        )),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| {
            if r.answer.is_some() {
                "answered"
            } else {
                "failed"
            }
        }))),
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.failure.as_deref()),
        )),
        Arc::new(chain.finish()),
        strings(&|r| &r.titles),
        strings(&|r| &r.corpus_ids),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.trace.as_str()),
        )),
        u32s(&|r| r.stats.llm_calls),
        u32s(&|r| r.stats.cached_calls),
        u64s(&|r| r.stats.prompt_tokens),
        u64s(&|r| r.stats.completion_tokens),
        u32s(&|r| r.stats.retries),
        u32s(&|r| r.parse_failures.len() as u32),
        strings(&|r| &r.parse_failures),
    ];
    RecordBatch::try_new(review_schema(), columns).context("building the output batch")
}
