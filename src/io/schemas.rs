//! The result columns of the jobs' output files (docs/cli.md documents each column).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field};

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
