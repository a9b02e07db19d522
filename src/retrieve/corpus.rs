//! A passage corpus for retrieval beyond a question's own pool (`--corpus FILE`): a
//! Parquet file with columns `id` (string or integer), `text` (string) and optionally
//! `title` (string). Rows without usable text are skipped and counted.

use std::path::Path;

use anyhow::{Context, Result};
use arrow::array::Array;

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

impl Corpus {
    /// Reads the whole file and builds the index.
    pub fn from_parquet(path: &Path) -> Result<Self> {
        // The reader's errors name the file.
        let mut input = ParquetInput::open(path, 8192).context("cannot read the corpus")?;
        input.check_column("id", &["string", "integer"], true)?;
        input.check_column("text", &["string"], true)?;
        let has_title = input.check_column("title", &["string"], false)?;
        let (mut ids, mut titles, mut texts) = (Vec::new(), Vec::new(), Vec::new());
        let (mut skipped, mut first_skip_reason) = (0u64, None);
        for batch in input.by_ref() {
            let batch = batch.with_context(|| format!("corrupt corpus file {}", path.display()))?;
            for bad in &batch.bad {
                skipped += 1;
                first_skip_reason.get_or_insert_with(|| format!("row {}: {}", bad.row, bad.reason));
            }
            let batch = batch.batch;
            let id = display_column(batch.column_by_name("id").expect("checked"))?;
            let text = string_column(&batch, "text")?;
            let title = has_title
                .then(|| string_column(&batch, "title"))
                .transpose()?;
            for r in 0..batch.num_rows() {
                match check_text(&text, r, "text") {
                    Ok(Some(t)) => {
                        ids.push(id.value(r).to_string());
                        texts.push(t.to_string());
                        titles.push(
                            title
                                .as_ref()
                                .filter(|c| !c.is_null(r))
                                .map_or(String::new(), |c| c.value(r).to_string()),
                        );
                    }
                    Ok(None) | Err(_) => {
                        skipped += 1;
                        if first_skip_reason.is_none() {
                            let why = check_text(&text, r, "text")
                                .err()
                                .unwrap_or_else(|| "text is null".into());
                            first_skip_reason = Some(format!("row {}: {why}", id.value(r)));
                        }
                    }
                }
            }
        }
        let docs: Vec<String> = titles
            .iter()
            .zip(&texts)
            .map(|(t, x)| format!("{t} {x}"))
            .collect();
        let index = Bm25Index::new(&docs);
        if skipped > 0 {
            log::warn!(
                "corpus {}: {skipped} rows skipped (first: {})",
                path.display(),
                first_skip_reason.as_deref().unwrap_or("?")
            );
        }
        Ok(Self {
            ids,
            titles,
            texts,
            skipped,
            first_skip_reason,
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

    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};

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
