//! The host tensor that checkpoints are read into and backends upload: a dense
//! row-major f32 array with its shape. A leaf: it sits below both `model` (which reads
//! weights into it) and `backend` (which uploads and downloads it).

use std::sync::Arc;

use crate::quant::QuantRows;

/// A dense row-major f32 tensor on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
    /// The blocks a quantised checkpoint stored this `[rows, cols]` weight in, when they
    /// hold it exactly (`data` is their dequantisation): the CPU's `q8` dense layers
    /// multiply them as they are.
    pub stored: Option<Arc<QuantRows>>,
}

impl HostTensor {
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Self {
            shape,
            data,
            stored: None,
        }
    }

    /// `self` with the blocks it was dequantised from.
    pub fn with_stored(mut self, stored: QuantRows) -> Self {
        debug_assert_eq!(stored.rows * stored.cols, self.data.len());
        self.stored = Some(Arc::new(stored));
        self
    }

    /// Rows `order[0], order[1], …` of a `[rows, cols]` tensor, or of a vector (one
    /// value a row), with their stored blocks.
    pub fn select_rows(&self, order: &[usize]) -> Self {
        let cols = self.data.len() / self.shape[0].max(1);
        let data = order
            .iter()
            .flat_map(|&r| self.data[r * cols..(r + 1) * cols].iter().copied())
            .collect();
        let mut shape = self.shape.clone();
        shape[0] = order.len();
        let out = Self::new(shape, data);
        match &self.stored {
            Some(stored) => out.with_stored(stored.select_rows(order)),
            None => out,
        }
    }
}

/// Index of the largest value; ties (and NaNs) go to the lowest index, as
/// `torch.argmax`.
pub fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best
}
