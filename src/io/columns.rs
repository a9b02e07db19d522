//! Arrow column types and builders shared by the output files.

use std::sync::Arc;

use arrow_array::builder::{Float32Builder, Int32Builder, ListBuilder};
use arrow_array::{ListArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields};

/// `list<t>` with nullable items (the list type of the output files).
pub fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", t, true)))
}

/// Builds a `list<struct<chain: list<int32>, score: float32>>` column: per row, a
/// list of scored chains (beams, paths).
#[derive(Default)]
pub struct ScoredChainsBuilder {
    chains: ListBuilder<Int32Builder>,
    scores: Float32Builder,
    counts: Vec<usize>,
    in_row: usize,
}

impl ScoredChainsBuilder {
    fn fields() -> Fields {
        Fields::from(vec![
            Field::new("chain", list_of(DataType::Int32), false),
            Field::new("score", DataType::Float32, false),
        ])
    }

    /// The column's type.
    pub fn data_type() -> DataType {
        list_of(DataType::Struct(Self::fields()))
    }

    /// Adds a chain to the current row.
    pub fn push(&mut self, chain: &[usize], score: f32) {
        self.chains
            .values()
            .extend(chain.iter().map(|&x| Some(x as i32)));
        self.chains.append(true);
        self.scores.append_value(score);
        self.in_row += 1;
    }

    /// Ends the current row.
    pub fn end_row(&mut self) {
        self.counts.push(std::mem::take(&mut self.in_row));
    }

    pub fn finish(mut self) -> ListArray {
        ListArray::new(
            Arc::new(Field::new("item", DataType::Struct(Self::fields()), true)),
            OffsetBuffer::from_lengths(self.counts),
            Arc::new(StructArray::new(
                Self::fields(),
                vec![
                    Arc::new(self.chains.finish()),
                    Arc::new(self.scores.finish()),
                ],
                None,
            )),
            None,
        )
    }
}
