//! Building blocks shared by the models: `Linear` and `LayerNorm`, loaded from a
//! [`Weights`] view and run through a [`Backend`].

use anyhow::Result;

use super::weights::Weights;
use crate::backend::Backend;

/// `y = x·Wᵀ + b` with HF's `[out, in]` weight layout.
pub struct Linear<B: Backend> {
    pub weight: B::Tensor,
    pub bias: Option<B::Tensor>,
}

impl<B: Backend> Linear<B> {
    /// Loads `<w>.weight` `[out, in]` and, when `bias`, `<w>.bias` `[out]`.
    pub fn load(be: &B, w: &Weights, input: usize, output: usize, bias: bool) -> Result<Self> {
        Ok(Self {
            weight: be.upload(&w.get("weight", &[output, input])?)?,
            bias: if bias {
                Some(be.upload(&w.get("bias", &[output])?)?)
            } else {
                None
            },
        })
    }

    pub fn forward(&self, be: &B, x: &B::Tensor) -> Result<B::Tensor> {
        Ok(be.linear(x, &self.weight, self.bias.as_ref())?)
    }
}

/// Affine LayerNorm over the last dimension.
pub struct LayerNorm<B: Backend> {
    pub weight: B::Tensor,
    pub bias: B::Tensor,
    pub eps: f32,
}

impl<B: Backend> LayerNorm<B> {
    pub fn load(be: &B, w: &Weights, size: usize, eps: f32) -> Result<Self> {
        Ok(Self {
            weight: be.upload(&w.get_norm("weight", &[size])?)?,
            bias: be.upload(&w.get_norm("bias", &[size])?)?,
            eps,
        })
    }

    /// `x ← LN(x + residual)`.
    pub fn forward(&self, be: &B, x: &mut B::Tensor, residual: Option<&B::Tensor>) -> Result<()> {
        Ok(be.layer_norm(x, residual, &self.weight, &self.bias, self.eps)?)
    }
}
