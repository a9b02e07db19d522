//! The question file: one row per multi-hop question with its candidate passages and
//! gold labels, written by `hopscore import` and read by the strategies and `eval`.
//!
//! This file is the single definition of the schema. Columns (see also README, "Question
//! files"):
//!
//! | column | type | null | meaning |
//! |---|---|---|---|
//! | `id` | utf8 | no | the dataset's question id (`_id` in HotpotQA/2Wiki, `id` in MuSiQue) |
//! | `dataset` | utf8 | no | `hotpotqa`, `musique` or `2wiki`; selects the passage rendering |
//! | `question` | utf8 | no | the question text as in the source file |
//! | `passages` | list<struct<title: utf8, text: utf8, sentences: list<utf8>>> | no | candidate passages in source order; `text` is the sentences joined without separator (HotpotQA/2Wiki) or `paragraph_text` (MuSiQue); `sentences` is null for MuSiQue |
//! | `supporting` | list<int32> | no | 0-based indices into `passages` of the gold supporting passages, ascending |
//! | `hops` | int32 | yes | hop count used by Beam Retrieval: MuSiQue from the id prefix, HotpotQA 2, 2Wiki 2 (4 for `bridge_comparison`) |
//! | `answer` | utf8 | yes | gold answer (null when the file has none, e.g. a test set) |
//! | `answer_aliases` | list<utf8> | no | other accepted answers (MuSiQue), empty otherwise |
//! | `type` | utf8 | yes | question type (HotpotQA `bridge`/`comparison`, 2Wiki `compositional`/`comparison`/`inference`/`bridge_comparison`), null for MuSiQue |
//! | `level` | utf8 | yes | HotpotQA difficulty level, null otherwise |
//! | `supporting_facts` | list<struct<title: utf8, sent_idx: int32>> | yes | HotpotQA/2Wiki sentence-level gold as in the source file, for the official SP metric; null for MuSiQue |
//! | `issues` | list<utf8> | no | data problems found on import that did not make the question unusable (for example a supporting fact naming a sentence index the passage lacks) |
//!
//! Rows are written in row groups of at most [`QuestionWriter`]'s chunk size, so neither
//! writing nor reading holds a whole training set in memory.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use super::atomic::PendingFile;
use super::parquet_io::{create_writer, ParquetInput, ParquetSink};
use super::quarantine::BadRow;
use anyhow::{bail, Context, Result};
use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, Int32Array, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

/// The source dataset of a question; decides the hop-count rule on import and the
/// passage rendering in the strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Dataset {
    /// HotpotQA (distractor or fullwiki JSON: `_id`, `context`, `supporting_facts`).
    #[cfg_attr(feature = "cli", value(name = "hotpotqa"))]
    HotpotQa,
    /// MuSiQue (JSON lines: `id`, `paragraphs` with `is_supporting`).
    #[cfg_attr(feature = "cli", value(name = "musique"))]
    Musique,
    /// 2WikiMultihopQA (HotpotQA-like JSON with `evidences`).
    #[cfg_attr(feature = "cli", value(name = "2wiki"))]
    TwoWiki,
}

impl Dataset {
    /// The name stored in the `dataset` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Dataset::HotpotQa => "hotpotqa",
            Dataset::Musique => "musique",
            Dataset::TwoWiki => "2wiki",
        }
    }

    /// Inverse of [`Dataset::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        [Dataset::HotpotQa, Dataset::Musique, Dataset::TwoWiki]
            .into_iter()
            .find(|d| d.as_str() == name)
    }
}

/// One candidate passage.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    pub title: String,
    /// The passage body without its title.
    pub text: String,
    /// The sentence split of `text` (HotpotQA/2Wiki); `None` when the source has none.
    pub sentences: Option<Vec<String>>,
}

/// A sentence-level gold fact: the passage title and the 0-based sentence index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SupportingFact {
    pub title: String,
    pub sent_idx: i32,
}

/// One row of the question file (see the module documentation for each column).
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub id: String,
    pub dataset: Dataset,
    pub question: String,
    pub passages: Vec<Passage>,
    /// Indices into `passages`, ascending, without duplicates.
    pub supporting: Vec<usize>,
    pub hops: Option<u32>,
    pub answer: Option<String>,
    pub answer_aliases: Vec<String>,
    /// The `type` column.
    pub question_type: Option<String>,
    pub level: Option<String>,
    pub supporting_facts: Option<Vec<SupportingFact>>,
    pub issues: Vec<String>,
}

impl Question {
    /// The hop count to evaluate and search with: `hops`, or the number of supporting
    /// passages when the file gives none. One rule for a `hops` below 1 (0, or negative
    /// in the file): it is a broken gold label, recorded in `issues`, and counts as
    /// absent.
    pub fn hop_count(&self) -> usize {
        self.hops
            .filter(|&h| h >= 1)
            .map_or(self.supporting.len(), |h| h as usize)
    }

    /// The recorded problem of a `hops` below 1 (see [`Question::hop_count`]), if any.
    pub fn hops_issue(&self) -> Option<&str> {
        self.issues
            .iter()
            .map(String::as_str)
            .find(|i| i.contains(HOPS_PROBLEM))
    }

    /// Checks what scoring needs (an id, a question, passages); the error is the
    /// quarantine reason. Problems with the gold labels do not make a question
    /// unusable for scoring: see [`Question::gold_problems`].
    pub fn check(&self) -> Result<(), String> {
        self.check_query()?;
        if self.passages.is_empty() {
            return Err("the question has no passages".into());
        }
        Ok(())
    }

    /// Checks what a query needs (an id and a question; passages are optional: a
    /// first-stage retriever fills them).
    pub fn check_query(&self) -> Result<(), String> {
        if self.id.trim().is_empty() {
            return Err("id is empty".into());
        }
        if self.question.trim().is_empty() {
            return Err("question is empty".into());
        }
        Ok(())
    }

    /// The titles of the gold passages a retriever missed ([`gold_not_retrieved`]):
    /// gold the pool lacks, which `eval` counts as never found.
    pub fn gold_not_retrieved(&self) -> impl Iterator<Item = &str> {
        self.issues.iter().filter_map(|i| {
            i.strip_prefix(NOT_RETRIEVED.0)?
                .strip_suffix(NOT_RETRIEVED.1)
        })
    }

    /// What is wrong with the gold labels (`supporting`, `supporting_facts`, `hops`),
    /// which only `eval` reads.
    pub fn gold_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let n = self.passages.len();
        if let Some(&s) = self.supporting.iter().find(|&&s| s >= n) {
            problems.push(format!(
                "supporting passage index {s} is out of range (the question has {n} passages)"
            ));
        }
        if self.supporting.windows(2).any(|w| w[0] >= w[1]) {
            problems.push("supporting passage indices are not strictly ascending".into());
        }
        if self.hops == Some(0) {
            problems.push(hops_problem(0));
        }
        for fact in self.supporting_facts.iter().flatten() {
            let missed = || self.gold_not_retrieved().any(|t| t == fact.title);
            if !self.passages.iter().any(|p| p.title == fact.title) && !missed() {
                problems.push(format!(
                    "supporting fact title {:?} is not the title of any passage",
                    fact.title
                ));
            }
            if fact.sent_idx < 0 {
                problems.push(format!(
                    "supporting fact ({:?}, {}) has a negative sentence index",
                    fact.title, fact.sent_idx
                ));
            }
        }
        problems
    }

    /// Records every gold-label problem in `issues` (marked with [`UNUSABLE_GOLD`],
    /// once each).
    pub fn note_gold_problems(&mut self, mut problems: Vec<String>) {
        problems.extend(self.gold_problems());
        for p in problems {
            let issue = format!("{UNUSABLE_GOLD}{p}");
            if !self.issues.contains(&issue) {
                self.issues.push(issue);
            }
        }
    }

    /// Whether `eval` can score this question: no gold-label problem, noted or found.
    pub fn gold_usable(&self) -> bool {
        !self.issues.iter().any(|i| i.starts_with(UNUSABLE_GOLD)) && self.gold_problems().is_empty()
    }
}

/// The `issues` entry naming (by title) a gold passage of the input that `retrieve`
/// did not put in the pool: still gold, never found
/// ([`Question::gold_not_retrieved`] reads it back).
pub fn gold_not_retrieved(title: &str) -> String {
    format!("{}{title}{}", NOT_RETRIEVED.0, NOT_RETRIEVED.1)
}

/// What surrounds the title in a [`gold_not_retrieved`] entry.
const NOT_RETRIEVED: (&str, &str) = ("gold passage `", "` was not retrieved");

/// The start of an `issues` entry that makes the gold labels unusable (the question is
/// still scored; `eval` skips it and reports why).
pub const UNUSABLE_GOLD: &str = "unusable gold labels: ";

fn item(ty: DataType) -> Arc<Field> {
    Arc::new(Field::new("item", ty, true))
}

fn passage_fields() -> Fields {
    Fields::from(vec![
        Field::new("title", DataType::Utf8, false),
        Field::new("text", DataType::Utf8, false),
        Field::new("sentences", DataType::List(item(DataType::Utf8)), true),
    ])
}

fn fact_fields() -> Fields {
    Fields::from(vec![
        Field::new("title", DataType::Utf8, false),
        Field::new("sent_idx", DataType::Int32, false),
    ])
}

/// The Arrow schema of a question file.
pub fn schema() -> SchemaRef {
    let strings = DataType::List(item(DataType::Utf8));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("dataset", DataType::Utf8, false),
        Field::new("question", DataType::Utf8, false),
        Field::new(
            "passages",
            DataType::List(item(DataType::Struct(passage_fields()))),
            false,
        ),
        Field::new("supporting", DataType::List(item(DataType::Int32)), false),
        Field::new("hops", DataType::Int32, true),
        Field::new("answer", DataType::Utf8, true),
        Field::new("answer_aliases", strings.clone(), false),
        Field::new("type", DataType::Utf8, true),
        Field::new("level", DataType::Utf8, true),
        Field::new(
            "supporting_facts",
            DataType::List(item(DataType::Struct(fact_fields()))),
            true,
        ),
        Field::new("issues", strings, false),
    ]))
}

/// Columns a question file must have; the others default to empty/null when absent.
const REQUIRED: [&str; 4] = ["id", "dataset", "question", "passages"];

/// A list array of `lengths.len()` rows over `values`; `valid[i] == false` makes row i null.
fn list(
    item_type: DataType,
    lengths: Vec<usize>,
    values: ArrayRef,
    valid: Option<Vec<bool>>,
) -> ArrayRef {
    Arc::new(ListArray::new(
        item(item_type),
        OffsetBuffer::from_lengths(lengths),
        values,
        valid.map(NullBuffer::from),
    ))
}

fn strings<'a>(values: impl Iterator<Item = &'a str>) -> ArrayRef {
    let mut b = StringBuilder::new();
    values.for_each(|v| b.append_value(v));
    Arc::new(b.finish())
}

fn opt_strings<'a>(values: impl Iterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(values))
}

/// The record batch holding `questions` (owned or borrowed) in the [`schema`] layout.
pub fn to_batch<Q: std::borrow::Borrow<Question>>(questions: &[Q]) -> Result<RecordBatch> {
    let qs: Vec<&Question> = questions.iter().map(Q::borrow).collect();
    let passages = || qs.iter().flat_map(|q| q.passages.iter());
    let sentences = || passages().flat_map(|p| p.sentences.iter().flatten());
    let sentence_list = list(
        DataType::Utf8,
        passages()
            .map(|p| p.sentences.as_ref().map_or(0, Vec::len))
            .collect(),
        strings(sentences().map(String::as_str)),
        Some(passages().map(|p| p.sentences.is_some()).collect()),
    );
    let passage_struct = StructArray::new(
        passage_fields(),
        vec![
            strings(passages().map(|p| p.title.as_str())),
            strings(passages().map(|p| p.text.as_str())),
            sentence_list,
        ],
        None,
    );
    let facts = || qs.iter().flat_map(|q| q.supporting_facts.iter().flatten());
    let fact_struct = StructArray::new(
        fact_fields(),
        vec![
            strings(facts().map(|f| f.title.as_str())),
            Arc::new(Int32Array::from(
                facts().map(|f| f.sent_idx).collect::<Vec<_>>(),
            )),
        ],
        None,
    );
    let supporting = qs
        .iter()
        .flat_map(|q| &q.supporting)
        .map(|&s| i32::try_from(s))
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("a supporting passage index does not fit the int32 column")?;
    let hops = qs
        .iter()
        .map(|q| q.hops.map(i32::try_from).transpose())
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("a hop count does not fit the int32 column")?;
    let columns: Vec<ArrayRef> = vec![
        strings(qs.iter().map(|q| q.id.as_str())),
        strings(qs.iter().map(|q| q.dataset.as_str())),
        strings(qs.iter().map(|q| q.question.as_str())),
        list(
            DataType::Struct(passage_fields()),
            qs.iter().map(|q| q.passages.len()).collect(),
            Arc::new(passage_struct),
            None,
        ),
        list(
            DataType::Int32,
            qs.iter().map(|q| q.supporting.len()).collect(),
            Arc::new(Int32Array::from(supporting)),
            None,
        ),
        Arc::new(Int32Array::from(hops)),
        opt_strings(qs.iter().map(|q| q.answer.as_deref())),
        list(
            DataType::Utf8,
            qs.iter().map(|q| q.answer_aliases.len()).collect(),
            strings(
                qs.iter()
                    .flat_map(|q| q.answer_aliases.iter().map(String::as_str)),
            ),
            None,
        ),
        opt_strings(qs.iter().map(|q| q.question_type.as_deref())),
        opt_strings(qs.iter().map(|q| q.level.as_deref())),
        list(
            DataType::Struct(fact_fields()),
            qs.iter()
                .map(|q| q.supporting_facts.as_ref().map_or(0, Vec::len))
                .collect(),
            Arc::new(fact_struct),
            Some(qs.iter().map(|q| q.supporting_facts.is_some()).collect()),
        ),
        list(
            DataType::Utf8,
            qs.iter().map(|q| q.issues.len()).collect(),
            strings(qs.iter().flat_map(|q| q.issues.iter().map(String::as_str))),
            None,
        ),
    ];
    Ok(RecordBatch::try_new(schema(), columns)?)
}

/// Writes questions to a Parquet file, one row group per [`QuestionWriter::write`] call.
pub struct QuestionWriter {
    writer: ParquetSink,
    rows: u64,
    passages: u64,
}

impl QuestionWriter {
    /// Creates `path` (and its directory) with `metadata` as `hopscore.*` key-values.
    pub fn create(path: &Path, metadata: &[(String, String)]) -> Result<Self> {
        Ok(Self {
            writer: create_writer(path, schema(), metadata)?,
            rows: 0,
            passages: 0,
        })
    }

    /// Writes `questions` as one row group (nothing for an empty slice), so memory stays
    /// bounded by the caller's chunk size.
    pub fn write(&mut self, questions: &[Question]) -> Result<()> {
        if questions.is_empty() {
            return Ok(());
        }
        self.writer.write(&to_batch(questions)?)?;
        self.writer.flush()?;
        self.rows += questions.len() as u64;
        self.passages += questions
            .iter()
            .map(|q| q.passages.len() as u64)
            .sum::<u64>();
        Ok(())
    }

    /// Completes the file without renaming it into place yet (see
    /// [`ParquetSink::seal`]); returns it and the number of questions and passages.
    pub fn seal(self) -> Result<(PendingFile, u64, u64)> {
        Ok((self.writer.seal()?, self.rows, self.passages))
    }

    /// Completes the file and renames it into place; returns the number of questions
    /// and passages written.
    pub fn finish(self) -> Result<(u64, u64)> {
        let (file, rows, passages) = self.seal()?;
        file.commit()?;
        Ok((rows, passages))
    }
}

/// A row read from a question file: the question, or the reason it cannot be used.
pub type RowResult = std::result::Result<Question, BadRow>;

/// Streams [`Question`]s from a question file, one record batch at a time. Rows that
/// break an invariant come back as [`BadRow`]s for the caller's quarantine; a missing
/// column or a column of the wrong type fails [`QuestionReader::open`].
pub struct QuestionReader {
    input: ParquetInput,
    pending: VecDeque<RowResult>,
    /// What a usable row needs ([`Question::check`], or [`Question::check_query`]).
    check: Check,
}

/// The check a decoded question must pass to be a good row.
type Check = fn(&Question) -> std::result::Result<(), String>;

impl QuestionReader {
    /// Opens `path`, checking the columns against [`schema`]. `batch_rows` is the number
    /// of questions decoded at a time.
    pub fn open(path: &Path, batch_rows: usize) -> Result<Self> {
        let input = ParquetInput::open(path, batch_rows)?;
        check_schema(&input.schema, &path.display().to_string())?;
        Ok(Self {
            input,
            pending: VecDeque::new(),
            check: Question::check,
        })
    }

    /// [`QuestionReader::open`] for queries: a question without passages is a good
    /// row (what a first-stage retriever reads).
    pub fn open_queries(path: &Path, batch_rows: usize) -> Result<Self> {
        Ok(Self {
            check: Question::check_query,
            ..Self::open(path, batch_rows)?
        })
    }

    /// Number of rows in the file (good and bad).
    pub fn total_rows(&self) -> u64 {
        self.input.total_rows
    }
}

/// Fails unless `found` has the required question-file columns, each of a type
/// readable as the one in [`schema`]; messages start with `source` (a path, or what
/// the rows are).
pub fn check_schema(found: &Schema, source: &str) -> Result<()> {
    for field in schema().fields() {
        let present = check_column_type(found, field.name()).map_err(|e| {
            anyhow::anyhow!("{source}: {e}; write question files with `hopscore import`")
        })?;
        if !present && REQUIRED.contains(&field.name().as_str()) {
            bail!(
                "{source} has no column `{}`, so it is not a question file (required: {}); create one with `hopscore import`",
                field.name(),
                REQUIRED.join(", ")
            );
        }
    }
    Ok(())
}

/// Whether `found` has the question-file column `name` (false when absent); fails when
/// its type cannot be read as the one in [`schema`]. Other files that reuse a column of
/// the question file (predictions with `supporting_facts`) check it with this too.
pub fn check_column_type(found: &Schema, name: &str) -> Result<bool> {
    let expected = schema();
    let want = expected.field_with_name(name)?.data_type();
    match found.field_with_name(name) {
        Ok(f) => compatible(f.data_type(), want)
            .map(|()| true)
            .map_err(|why| {
                anyhow::anyhow!(
                    "column `{name}` has type {}, expected {want} ({why})",
                    f.data_type()
                )
            }),
        Err(_) => Ok(false),
    }
}

impl Iterator for QuestionReader {
    type Item = Result<RowResult>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.pending.is_empty() {
            let input = match self.input.next()? {
                Ok(b) => b,
                Err(e) => return Some(Err(e).context("reading the question file")),
            };
            let rows = match decode_rows(&input.batch, &input.rows, self.check) {
                Ok(rows) => rows,
                Err(e) => return Some(Err(e)),
            };
            // In file order: the rows with invalid UTF-8 among the decoded ones.
            let mut all: Vec<(u64, RowResult)> = input.rows.into_iter().zip(rows).collect();
            all.extend(input.bad.into_iter().map(|b| (b.row, Err(b))));
            all.sort_by_key(|(row, _)| *row);
            self.pending.extend(all.into_iter().map(|(_, r)| r));
        }
        self.pending.pop_front().map(Ok)
    }
}

/// Whether a column of type `found` can be read as `expected` (string and integer
/// widths, list flavours and struct field order may differ; struct fields are matched
/// by name).
fn compatible(found: &DataType, expected: &DataType) -> std::result::Result<(), String> {
    use DataType::*;
    match (found, expected) {
        // A column that only holds nulls (what pandas and pyarrow make of an empty
        // list column): read as the expected type, all null.
        (Null, _) => Ok(()),
        (Utf8 | LargeUtf8 | Utf8View, Utf8) => Ok(()),
        (f, Int32) if f.is_integer() => Ok(()),
        // pandas turns an integer column with nulls (`hops`) into float64.
        (f, Int32) if f.is_floating() => Ok(()),
        (List(f) | LargeList(f), List(e)) => compatible(f.data_type(), e.data_type()),
        (Struct(ff), Struct(ef)) => ef.iter().try_for_each(|e| match ff.find(e.name()) {
            Some((_, f)) => compatible(f.data_type(), e.data_type())
                .map_err(|why| format!("field `{}`: {why}", e.name())),
            None => Err(format!("the struct has no field `{}`", e.name())),
        }),
        _ => Err(format!("{found} is not {expected}")),
    }
}

/// The columns of one batch cast to the [`schema`] types (`None` for absent optional ones).
struct Columns {
    id: StringArray,
    dataset: StringArray,
    question: StringArray,
    passages: ListArray,
    supporting: Option<ListArray>,
    hops: Option<Int32Array>,
    answer: Option<StringArray>,
    answer_aliases: Option<ListArray>,
    question_type: Option<StringArray>,
    level: Option<StringArray>,
    supporting_facts: Option<ListArray>,
    issues: Option<ListArray>,
}

fn column(batch: &RecordBatch, name: &str) -> Result<Option<ArrayRef>> {
    let Some(col) = batch.column_by_name(name) else {
        return Ok(None);
    };
    let expected = schema();
    let ty = nullable(expected.field_with_name(name)?.data_type());
    Ok(Some(arrow_cast::cast(col, &ty).with_context(|| {
        format!("column `{name}` cannot be read as {ty}")
    })?))
}

/// `ty` with every nested field nullable: a null where the schema has none (a null
/// passage title from a writer whose fields are nullable by default) is a bad row,
/// found by the row checks of [`decode_row`], not a failed batch.
fn nullable(ty: &DataType) -> DataType {
    let field = |f: &Arc<Field>| Arc::new(Field::new(f.name(), nullable(f.data_type()), true));
    match ty {
        DataType::List(f) => DataType::List(field(f)),
        DataType::Struct(fs) => DataType::Struct(fs.iter().map(field).collect()),
        other => other.clone(),
    }
}

fn string_col(batch: &RecordBatch, name: &str) -> Result<Option<StringArray>> {
    Ok(column(batch, name)?.map(|c| c.as_string::<i32>().clone()))
}

fn list_col(batch: &RecordBatch, name: &str) -> Result<Option<ListArray>> {
    Ok(column(batch, name)?.map(|c| c.as_list::<i32>().clone()))
}

fn required<T>(col: Option<T>, name: &str) -> Result<T> {
    col.with_context(|| format!("batch has no column `{name}`"))
}

/// Decodes the rows of `batch` (of a schema [`check_schema`] accepts); `rows` are
/// their file row numbers.
pub fn decode_batch(batch: &RecordBatch, rows: &[u64]) -> Result<Vec<RowResult>> {
    decode_rows(batch, rows, Question::check)
}

/// [`decode_batch`] for queries: a question without passages is a good row (what a
/// first-stage retriever reads, as [`QuestionReader::open_queries`]).
pub fn decode_queries(batch: &RecordBatch, rows: &[u64]) -> Result<Vec<RowResult>> {
    decode_rows(batch, rows, Question::check_query)
}

/// [`decode_batch`] with `check` deciding which questions are good rows.
fn decode_rows(batch: &RecordBatch, rows: &[u64], check: Check) -> Result<Vec<RowResult>> {
    let cols = Columns {
        id: required(string_col(batch, "id")?, "id")?,
        dataset: required(string_col(batch, "dataset")?, "dataset")?,
        question: required(string_col(batch, "question")?, "question")?,
        passages: required(list_col(batch, "passages")?, "passages")?,
        supporting: list_col(batch, "supporting")?,
        hops: column(batch, "hops")?.map(|c| c.as_primitive::<Int32Type>().clone()),
        answer: string_col(batch, "answer")?,
        answer_aliases: list_col(batch, "answer_aliases")?,
        question_type: string_col(batch, "type")?,
        level: string_col(batch, "level")?,
        supporting_facts: list_col(batch, "supporting_facts")?,
        issues: list_col(batch, "issues")?,
    };
    Ok((0..batch.num_rows())
        .map(|r| {
            decode_row(&cols, r, check).map_err(|reason| BadRow {
                row: rows[r],
                id: (!cols.id.is_null(r)).then(|| cols.id.value(r).to_string()),
                reason,
            })
        })
        .collect())
}

fn text(col: &StringArray, i: usize, what: &str) -> std::result::Result<String, String> {
    if col.is_null(i) {
        return Err(format!("{what} is null"));
    }
    Ok(col.value(i).to_string())
}

fn opt_text(col: &Option<StringArray>, r: usize) -> Option<String> {
    col.as_ref()
        .filter(|c| !c.is_null(r))
        .map(|c| c.value(r).to_string())
}

/// The value range of row `r` of a list column; `None` when the row is null.
fn range(list: &ListArray, r: usize) -> Option<Range<usize>> {
    if list.is_null(r) {
        return None;
    }
    let o = list.value_offsets();
    Some(o[r] as usize..o[r + 1] as usize)
}

fn string_list(
    list: &ListArray,
    r: usize,
    what: &str,
) -> std::result::Result<Option<Vec<String>>, String> {
    let Some(range) = range(list, r) else {
        return Ok(None);
    };
    let values = list.values().as_string::<i32>();
    range
        .map(|i| text(values, i, what))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Some)
}

/// The column `supporting_facts` of a batch whose schema passed
/// [`check_column_type`], in the [`schema`] type (`None` when absent).
pub fn supporting_facts_column(batch: &RecordBatch) -> Result<Option<ListArray>> {
    list_col(batch, "supporting_facts")
}

/// Row `r` of a `supporting_facts` column (`None` when null); the error names a null
/// fact or title.
pub fn supporting_facts_at(
    list: &ListArray,
    r: usize,
) -> std::result::Result<Option<Vec<SupportingFact>>, String> {
    let Some(range) = range(list, r) else {
        return Ok(None);
    };
    let fs = list.values().as_struct();
    let (titles, indices) = (
        fs.column(0).as_string::<i32>(),
        fs.column(1).as_primitive::<Int32Type>(),
    );
    range
        .map(|i| {
            if fs.is_null(i) || indices.is_null(i) {
                return Err("a supporting fact is null".to_string());
            }
            Ok(SupportingFact {
                title: text(titles, i, "a supporting fact title")?,
                sent_idx: indices.value(i),
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Some)
}

/// What every `hops` problem says (found again by [`Question::hops_issue`]).
const HOPS_PROBLEM: &str = "(a hop count is at least 1; taken as absent)";

/// The gold-label problem of a `hops` value below 1 (see [`Question::hop_count`]).
fn hops_problem(hops: i32) -> String {
    format!("hops is {hops} {HOPS_PROBLEM}")
}

fn decode_row(c: &Columns, r: usize, check: Check) -> std::result::Result<Question, String> {
    let dataset_name = text(&c.dataset, r, "dataset")?;
    let dataset = Dataset::parse(&dataset_name).ok_or_else(|| {
        format!("dataset {dataset_name:?} is not one of hotpotqa, musique, 2wiki")
    })?;
    let passage_range = range(&c.passages, r).ok_or("passages is null")?;
    let ps = c.passages.values().as_struct();
    let (titles, texts) = (
        ps.column(0).as_string::<i32>(),
        ps.column(1).as_string::<i32>(),
    );
    let sentences = ps.column(2).as_list::<i32>();
    let passages = passage_range
        .enumerate()
        .map(|(k, i)| {
            if ps.is_null(i) {
                return Err(format!("passage {k} is null"));
            }
            Ok(Passage {
                title: text(titles, i, &format!("title of passage {k}"))?,
                text: text(texts, i, &format!("text of passage {k}"))?,
                sentences: string_list(sentences, i, &format!("a sentence of passage {k}"))?,
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut gold = Vec::new();
    let supporting = match &c.supporting {
        Some(list) => match range(list, r) {
            None => {
                gold.push("supporting is null".to_string());
                Vec::new()
            }
            Some(range) => {
                let values = list.values().as_primitive::<Int32Type>();
                range
                    .filter_map(|i| {
                        if values.is_null(i) {
                            gold.push("supporting holds a null index".to_string());
                            return None;
                        }
                        usize::try_from(values.value(i))
                            .map_err(|_| {
                                gold.push(format!(
                                    "supporting holds the negative index {}",
                                    values.value(i)
                                ))
                            })
                            .ok()
                    })
                    .collect()
            }
        },
        None => Vec::new(),
    };
    let hops = match &c.hops {
        Some(h) if !h.is_null(r) => match u32::try_from(h.value(r)) {
            Ok(v) if v >= 1 => Some(v),
            _ => {
                gold.push(hops_problem(h.value(r)));
                None
            }
        },
        _ => None,
    };
    let supporting_facts = match &c.supporting_facts {
        Some(list) => supporting_facts_at(list, r).unwrap_or_else(|why| {
            gold.push(why);
            None
        }),
        None => None,
    };
    let list_or_empty = |col: &Option<ListArray>, what: &str| match col {
        Some(list) => string_list(list, r, what).map(Option::unwrap_or_default),
        None => Ok(Vec::new()),
    };
    let mut q = Question {
        id: text(&c.id, r, "id")?,
        dataset,
        question: text(&c.question, r, "question")?,
        passages,
        supporting,
        hops,
        answer: opt_text(&c.answer, r),
        answer_aliases: list_or_empty(&c.answer_aliases, "an answer alias")?,
        question_type: opt_text(&c.question_type, r),
        level: opt_text(&c.level, r),
        supporting_facts,
        issues: list_or_empty(&c.issues, "an issue")?,
    };
    check(&q)?;
    q.note_gold_problems(gold);
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &str, dataset: Dataset) -> Question {
        Question {
            id: id.into(),
            dataset,
            question: "Who?".into(),
            passages: vec![
                Passage {
                    title: "A".into(),
                    text: "One. Two.".into(),
                    sentences: Some(vec!["One.".into(), " Two.".into()]),
                },
                Passage {
                    title: "B".into(),
                    text: "Three.".into(),
                    sentences: None,
                },
            ],
            supporting: vec![0, 1],
            hops: Some(2),
            answer: Some("x".into()),
            answer_aliases: vec!["y".into()],
            question_type: Some("bridge".into()),
            level: None,
            supporting_facts: Some(vec![SupportingFact {
                title: "B".into(),
                sent_idx: 0,
            }]),
            issues: vec!["note".into()],
        }
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.parquet");
        let mut musique = sample("m1", Dataset::Musique);
        musique.supporting_facts = None;
        musique.hops = None;
        musique.answer = None;
        let qs = vec![
            sample("h1", Dataset::HotpotQa),
            musique,
            sample("w1", Dataset::TwoWiki),
        ];
        let mut w = QuestionWriter::create(&path, &[]).unwrap();
        w.write(&qs[..2]).unwrap();
        w.write(&qs[2..]).unwrap();
        assert_eq!(w.finish().unwrap(), (3, 6));
        let back: Vec<Question> = QuestionReader::open(&path, 2)
            .unwrap()
            .map(|r| r.unwrap().unwrap())
            .collect();
        assert_eq!(back, qs);
    }

    #[test]
    fn reader_accepts_other_string_and_integer_widths() {
        // Files from other writers may use large strings and 64-bit integers.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wide.parquet");
        let q = sample("a", Dataset::TwoWiki);
        let batch = to_batch(std::slice::from_ref(&q)).unwrap();
        let mut fields: Vec<Field> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let mut cols = batch.columns().to_vec();
        for (i, ty) in [(2, DataType::LargeUtf8), (5, DataType::Int64)] {
            cols[i] = arrow_cast::cast(&cols[i], &ty).unwrap();
            fields[i] = fields[i].clone().with_data_type(ty);
        }
        let schema = Arc::new(Schema::new(fields));
        let mut w = create_writer(&path, schema.clone(), &[]).unwrap();
        w.write(&RecordBatch::try_new(schema, cols).unwrap())
            .unwrap();
        w.close().unwrap();
        let back: Vec<Question> = QuestionReader::open(&path, 4)
            .unwrap()
            .map(|r| r.unwrap().unwrap())
            .collect();
        assert_eq!(back, vec![q]);
    }

    #[test]
    fn gold_problems_are_found_but_do_not_fail_the_check() {
        let mut q = sample("a", Dataset::HotpotQa);
        q.supporting = vec![2];
        assert_eq!(q.check(), Ok(()));
        assert!(q.gold_problems()[0].contains("out of range"));
        assert!(!q.gold_usable());
        let mut q = sample("a", Dataset::HotpotQa);
        q.supporting_facts = Some(vec![SupportingFact {
            title: "Z".into(),
            sent_idx: 0,
        }]);
        assert!(q.gold_problems()[0].contains("\"Z\""));
        let mut q = sample("a", Dataset::HotpotQa);
        q.passages.clear();
        q.supporting.clear();
        assert!(q.check().unwrap_err().contains("no passages"));
        let q = sample("a", Dataset::HotpotQa);
        assert!(q.check().is_ok() && q.gold_usable());
    }

    #[test]
    fn reader_names_the_missing_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false)]));
        let mut w = create_writer(&path, schema.clone(), &[]).unwrap();
        w.write(&RecordBatch::try_new(schema, vec![strings(["a"].into_iter())]).unwrap())
            .unwrap();
        w.close().unwrap();
        let err = QuestionReader::open(&path, 8).err().unwrap().to_string();
        assert!(err.contains("no column `dataset`"), "{err}");
    }

    #[test]
    fn reader_rejects_a_wrong_type_and_quarantines_bad_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        // `question` as int32: a type error at open.
        let batch = to_batch(&[sample("a", Dataset::HotpotQa)]).unwrap();
        let mut cols = batch.columns().to_vec();
        cols[2] = Arc::new(Int32Array::from(vec![1]));
        let mut fields: Vec<Field> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields[2] = Field::new("question", DataType::Int32, false);
        let schema = Arc::new(Schema::new(fields));
        let mut w = create_writer(&path, schema.clone(), &[]).unwrap();
        w.write(&RecordBatch::try_new(schema, cols).unwrap())
            .unwrap();
        w.close().unwrap();
        let err = QuestionReader::open(&path, 8).err().unwrap().to_string();
        assert!(err.contains("column `question` has type Int32"), "{err}");

        // A row whose supporting index points past its passages is kept with the
        // problem in `issues`; a row without passages is a bad row, the next row still
        // reads.
        let mut gold = sample("g", Dataset::HotpotQa);
        gold.supporting = vec![0, 5];
        let mut broken = sample("b", Dataset::HotpotQa);
        broken.passages.clear();
        broken.supporting.clear();
        let mut w = QuestionWriter::create(&path, &[]).unwrap();
        w.write(&[gold, broken, sample("c", Dataset::HotpotQa)])
            .unwrap();
        w.finish().unwrap();
        let rows: Vec<RowResult> = QuestionReader::open(&path, 8)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let kept = rows[0].clone().unwrap();
        assert!(!kept.gold_usable());
        assert!(
            kept.issues
                .iter()
                .any(|i| i.starts_with(UNUSABLE_GOLD) && i.contains("index 5 is out of range")),
            "{:?}",
            kept.issues
        );
        let bad = rows[1].clone().unwrap_err();
        assert_eq!((bad.row, bad.id.as_deref()), (1, Some("b")));
        assert!(bad.reason.contains("no passages"), "{}", bad.reason);
        assert_eq!(rows[2].as_ref().unwrap().id, "c");
    }
}
