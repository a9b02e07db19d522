//! A passage corpus for retrieval beyond a question's own pool (`--corpus FILE`): a
//! Parquet file with columns `id` (string or integer), `text` (string) and optionally
//! `title` (string). Rows without usable text or with a null id are skipped and
//! counted; an id on two rows is refused (its passage would fill two places of a pool).

use std::path::Path;

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use arrow_array::Array;

use super::Bm25Index;
use crate::io::parquet_io::{check_text, display_column, string_column, ParquetInput};

/// Passages loaded in file order, with a BM25 index over `title + " " + text`.
pub struct Corpus {
    pub ids: Vec<String>,
    pub titles: Vec<String>,
    pub texts: Vec<String>,
    /// Rows skipped for a null, empty or oversized text (with the first reason seen).
    pub skipped: u64,
    pub first_skip_reason: Option<String>,
    pub index: Bm25Index,
}

/// Rows of a corpus file that have no usable text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Skipped {
    pub rows: u64,
    /// The first reason seen (`row <id>: why`).
    pub first: Option<String>,
}

impl Skipped {
    fn note(&mut self, why: String) {
        self.rows += 1;
        self.first.get_or_insert(why);
    }
}

/// Calls `f(id, title, text)` for each usable row of the corpus file `path`, in file
/// order (a missing title is empty), without holding more than one batch; returns
/// the rows skipped for a null, empty or oversized text or invalid UTF-8.
pub fn for_each_passage(path: &Path, mut f: impl FnMut(&str, &str, &str)) -> Result<Skipped> {
    // The reader's errors name the file.
    let mut input = ParquetInput::open(path, 8192).context("cannot read the corpus")?;
    input.check_column("id", &["string", "integer"], true)?;
    input.check_column("text", &["string"], true)?;
    let has_title = input.check_column("title", &["string"], false)?;
    let mut skipped = Skipped::default();
    for batch in input.by_ref() {
        crate::stop::stop_point()?;
        let batch = batch.with_context(|| format!("corrupt corpus file {}", path.display()))?;
        for bad in &batch.bad {
            skipped.note(format!("row {}: {}", bad.row, bad.reason));
        }
        let batch_rows = batch.rows;
        let batch = batch.batch;
        let id = display_column(batch.column_by_name("id").expect("checked"))?;
        let text = string_column(&batch, "text")?;
        let title = has_title
            .then(|| string_column(&batch, "title"))
            .transpose()?;
        for r in 0..batch.num_rows() {
            if id.is_null(r) {
                skipped.note(format!("row {}: id is null", batch_rows_or(&batch_rows, r)));
                continue;
            }
            match check_text(&text, r, "text") {
                Ok(Some(t)) => {
                    let title = title
                        .as_ref()
                        .filter(|c| !c.is_null(r))
                        .map_or("", |c| c.value(r));
                    f(id.value(r), title, t);
                }
                Ok(None) => skipped.note(format!("row {}: text is null", id.value(r))),
                Err(why) => skipped.note(format!("row {}: {why}", id.value(r))),
            }
        }
    }
    if skipped.rows > 0 {
        log::warn!(
            "corpus {}: {} rows skipped (first: {})",
            path.display(),
            skipped.rows,
            skipped.first.as_deref().unwrap_or("?")
        );
    }
    Ok(skipped)
}

/// The file row of batch row `r` (`r` when the batch does not say).
fn batch_rows_or(rows: &[u64], r: usize) -> u64 {
    rows.get(r).copied().unwrap_or(r as u64)
}

impl Corpus {
    /// Reads the whole file and builds the index; refuses an id on two rows.
    pub fn from_parquet(path: &Path) -> Result<Self> {
        let (mut ids, mut titles, mut texts) = (Vec::new(), Vec::new(), Vec::new());
        let skipped = for_each_passage(path, |id, title, text| {
            ids.push(id.to_string());
            titles.push(title.to_string());
            texts.push(text.to_string());
        })?;
        let mut first: HashMap<&str, usize> = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            if let Some(j) = first.insert(id, i) {
                bail!(
                    "corpus {}: id `{id}` is on two rows (titles {:?} and {:?}): its \
                     passage would fill two places of a pool; give each passage one id \
                     (drop the repeated rows)",
                    path.display(),
                    titles[j],
                    titles[i]
                );
            }
        }
        drop(first);
        let docs: Vec<String> = titles
            .iter()
            .zip(&texts)
            .map(|(t, x)| format!("{t} {x}"))
            .collect();
        let index = Bm25Index::interruptible(&docs)?;
        Ok(Self {
            ids,
            titles,
            texts,
            skipped: skipped.rows,
            first_skip_reason: skipped.first,
            index,
        })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};

    use super::*;
    use crate::io::parquet_io::create_writer;

    #[test]
    fn a_missing_corpus_is_named_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-corpus.parquet");
        let err = format!("{:#}", Corpus::from_parquet(&path).err().unwrap());
        assert_eq!(err.matches("missing-corpus.parquet").count(), 1, "{err}");
        assert!(err.starts_with("cannot read the corpus"), "{err}");
    }

    #[test]
    fn loads_skips_bad_rows_and_indexes_titles() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corpus.parquet");
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![7, 8, 9])) as ArrayRef),
            (
                "title",
                Arc::new(StringArray::from(vec![Some("Paris"), None, Some("Berlin")])) as ArrayRef,
            ),
            (
                "text",
                Arc::new(StringArray::from(vec![
                    Some("Capital of France."),
                    Some("  "),
                    Some("Capital of Germany."),
                ])) as ArrayRef,
            ),
        ])
        .unwrap();
        let mut w = create_writer(&path, batch.schema(), &[]).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let c = Corpus::from_parquet(&path).unwrap();
        assert_eq!(c.ids, ["7", "9"]);
        assert_eq!(c.titles, ["Paris", "Berlin"]);
        assert_eq!(c.skipped, 1);
        assert_eq!(c.first_skip_reason.as_deref(), Some("row 8: text is empty"));
        let hits = c.index.search("berlin capital", 2);
        assert_eq!(hits[0].doc, 1);
    }
}
