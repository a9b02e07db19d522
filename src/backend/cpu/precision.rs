//! What the CPU backend's dense layers compute in, and the packed copies of their
//! weights.

use std::sync::{Arc, OnceLock};

use super::bf16_linear::{self, Bf16Weight};
use super::int8_linear::{self, Int8Scheme, Int8Weight};
use crate::quant::QuantRows;

/// Arithmetic of the CPU backend's dense layers (the encoders' and decoders'
/// projections and MLPs; attention, norms and heads stay f32). The CLI's `--cpu-gemm`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum CpuGemm {
    /// f32 throughout (the `gemm` crate): the reference.
    #[default]
    F32,
    /// Weights and activations rounded to bf16, f32 sums (AVX512-BF16).
    Bf16,
    /// Per-row int8 activations × per-channel int8 weights, i32 sums (AVX512-VNNI):
    /// ONNX Runtime's dynamic quantisation.
    Int8,
    /// Int8 activations and weights with a scale per 32 inputs (llama.cpp's `Q8_0`),
    /// i32 sums per block (AVX512-VNNI). GGUF weights in 32-weight blocks (`Q4_0`,
    /// `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0`, `Q4_K`, `Q5_K`) are multiplied as stored.
    Q8,
}

impl CpuGemm {
    /// Whether this CPU has the instructions of `self`.
    pub fn supported(self) -> bool {
        match self {
            CpuGemm::F32 => true,
            CpuGemm::Bf16 => bf16_linear::bf16_available(),
            CpuGemm::Int8 | CpuGemm::Q8 => int8_linear::vnni_available(),
        }
    }

    /// `self` where this CPU runs it, else f32 with a warning that says so.
    pub fn or_f32(self) -> CpuGemm {
        if self.supported() {
            return self;
        }
        let needs = match self {
            CpuGemm::Bf16 => "AVX512-BF16",
            _ => "AVX512-VNNI",
        };
        log::warn!(
            "--cpu-gemm {self:?} needs {needs}, which this CPU lacks: the dense layers run \
             in f32 instead (same results as --cpu-gemm f32)"
        );
        CpuGemm::F32
    }
}

/// Packed low-precision copies of a weight, made on its first use by a dense layer
/// and kept with it.
#[derive(Debug, Clone, Default)]
pub struct Packed {
    int8: OnceLock<Arc<Int8Weight>>,
    q8: OnceLock<Arc<Int8Weight>>,
    bf16: OnceLock<Arc<Bf16Weight>>,
}

impl Packed {
    /// The `q8` copy packed from the blocks a checkpoint stored (32 inputs each), as
    /// they are.
    pub fn from_stored(stored: &QuantRows) -> Self {
        let packed = Self::default();
        if stored.block == 32 {
            let _ = packed.q8.set(Arc::new(Int8Weight::from_rows(stored)));
        }
        packed
    }

    pub fn int8(&self, w: &[f32], n: usize, k: usize, scheme: Int8Scheme) -> &Int8Weight {
        let cell = match scheme {
            Int8Scheme::PerRow => &self.int8,
            Int8Scheme::Blocks32 => &self.q8,
        };
        cell.get_or_init(|| Arc::new(Int8Weight::new(w, n, k, scheme)))
    }

    pub fn bf16(&self, w: &[f32], n: usize, k: usize) -> &Bf16Weight {
        self.bf16.get_or_init(|| Arc::new(Bf16Weight::new(w, n, k)))
    }
}
