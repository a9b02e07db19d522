//! The host tensor that checkpoints are read into and backends upload: a dense
//! row-major f32 array with its shape. A leaf: it sits below both `model` (which reads
//! weights into it) and `backend` (which uploads and downloads it).

/// A dense row-major f32 tensor on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl HostTensor {
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Self { shape, data }
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
