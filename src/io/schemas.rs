//! The columns of the jobs' output files (docs/cli.md documents each column).

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

use super::columns::{list_of, ScoredChainsBuilder};

/// `classify`: `logits` (list<float32>, one per label of the head).
pub fn classify_fields() -> Vec<Field> {
    vec![Field::new(
        "logits",
        DataType::List(Arc::new(Field::new("item", DataType::Float32, true))),
        false,
    )]
}

/// `loglik`: `loglik_sum`, `loglik_mean` (float64) and `n_tokens` (uint32) of the
/// target.
pub fn loglik_fields() -> Vec<Field> {
    vec![
        Field::new("loglik_sum", DataType::Float64, false),
        Field::new("loglik_mean", DataType::Float64, false),
        Field::new("n_tokens", DataType::UInt32, false),
    ]
}

/// `beam`: the chain, its titles and score, every hop's scores, the beams, and the
/// first hop's logits.
pub fn beam_schema() -> SchemaRef {
    let f32_list = || list_of(DataType::Float32);
    let i32_list = || list_of(DataType::Int32);
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("chain", i32_list(), false),
        Field::new("chain_titles", list_of(DataType::Utf8), false),
        Field::new("chain_score", DataType::Float32, true),
        Field::new("hop_scores", f32_list(), false),
        Field::new("beams", ScoredChainsBuilder::data_type(), false),
        Field::new("hop1_logits", list_of(f32_list()), false),
    ]))
}

/// Fields of one entry of the `iterations` column.
pub fn iteration_fields(doc: &DataType) -> Fields {
    Fields::from(vec![
        Field::new("query", DataType::Utf8, false),
        Field::new("retrieved", list_of(doc.clone()), false),
        Field::new("tags", list_of(DataType::Utf8), false),
        Field::new("tag_logits", list_of(list_of(DataType::Float32)), false),
        Field::new("kept_text", list_of(DataType::Utf8), false),
        Field::new("next_query", DataType::Utf8, true),
    ])
}

/// `label`: per iteration the query, retrieved passages, tags, kept text and next
/// query; the kept passages and why the loop stopped. Passages are pool indices
/// (int32) or, with a corpus, corpus ids (utf8).
pub fn label_schema(corpus: bool) -> SchemaRef {
    let doc = if corpus {
        DataType::Utf8
    } else {
        DataType::Int32
    };
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new(
            "iterations",
            list_of(DataType::Struct(iteration_fields(&doc))),
            false,
        ),
        Field::new("kept", list_of(doc), false),
        Field::new("stop", DataType::Utf8, false),
    ]))
}

/// `lepus`: the ranking and its titles and scores, the best path and its score, the
/// top paths, and each document's single score.
pub fn lepus_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("chain", list_of(DataType::Int32), false),
        Field::new("chain_titles", list_of(DataType::Utf8), false),
        Field::new("doc_scores", list_of(DataType::Float32), false),
        Field::new("best_path", list_of(DataType::Int32), false),
        Field::new("best_path_score", DataType::Float32, true),
        Field::new("top_paths", ScoredChainsBuilder::data_type(), false),
        Field::new("single_scores", list_of(DataType::Float32), false),
    ]))
}

/// `review`: the answer, its status and failure, the evidence, the search trace and
/// the per-question call counts.
pub fn review_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("answer", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, false),
        Field::new("failure", DataType::Utf8, true),
        Field::new("chain", list_of(DataType::Int32), false),
        Field::new("evidence_titles", list_of(DataType::Utf8), false),
        Field::new("evidence_ids", list_of(DataType::Utf8), false),
        Field::new("trace", DataType::Utf8, false),
        Field::new("llm_calls", DataType::UInt32, false),
        Field::new("cached_calls", DataType::UInt32, false),
        Field::new("prompt_tokens", DataType::UInt64, false),
        Field::new("completion_tokens", DataType::UInt64, false),
        Field::new("retries", DataType::UInt32, false),
        Field::new("parse_failures", DataType::UInt32, false),
        Field::new("parse_failure_notes", list_of(DataType::Utf8), false),
    ]))
}
