//! Building blocks shared by the models: `Linear` (plain, row-fused or GPT-2 Conv1D)
//! and `LayerNorm`, loaded from a [`Weights`] view and run through a [`Backend`].

use anyhow::Result;

use super::weights::Weights;
use crate::backend::{Backend, Dense};
use crate::tensor::HostTensor;

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

    /// Uploads a host weight `[out, in]` and bias `[out]`.
    pub fn from_host(be: &B, weight: &HostTensor, bias: Option<&HostTensor>) -> Result<Self> {
        Ok(Self {
            weight: be.upload(weight)?,
            bias: bias.map(|b| be.upload(b)).transpose()?,
        })
    }

    /// Loads `names` (each `[out_k, input]` in HF layout) and fuses them along rows.
    pub fn load_fused(
        be: &B,
        w: &Weights,
        names: &[(&str, usize)],
        input: usize,
        bias: bool,
    ) -> Result<Self> {
        let ws: Vec<HostTensor> = names
            .iter()
            .map(|(n, out)| w.pp(n).get("weight", &[*out, input]))
            .collect::<Result<_, _>>()?;
        let bs: Option<Vec<HostTensor>> = bias
            .then(|| {
                names
                    .iter()
                    .map(|(n, out)| w.pp(n).get("bias", &[*out]))
                    .collect::<Result<_, _>>()
            })
            .transpose()?;
        Self::from_host(
            be,
            &cat_rows(&ws),
            bs.as_ref().map(|b| cat_rows(b)).as_ref(),
        )
    }

    /// Loads a GPT-2 Conv1D (`weight: [input, out]`, `bias: [out]`).
    pub fn load_conv1d(be: &B, w: &Weights, input: usize, out: usize) -> Result<Self> {
        Self::from_host(
            be,
            &transpose(&w.get("weight", &[input, out])?),
            Some(&w.get("bias", &[out])?),
        )
    }

    pub fn forward(&self, be: &B, x: &B::Tensor) -> Result<B::Tensor> {
        Ok(be.linear(x, &self.weight, self.bias.as_ref())?)
    }

    /// The layer as a head op reads it.
    pub fn dense(&self) -> Dense<'_, B::Tensor> {
        Dense {
            weight: &self.weight,
            bias: self.bias.as_ref(),
        }
    }

    /// `x ← x + self(input)` (a residual branch's output projection).
    pub fn forward_add(&self, be: &B, x: &mut B::Tensor, input: &B::Tensor) -> Result<()> {
        Ok(be.linear_add(x, input, &self.weight, self.bias.as_ref())?)
    }

    /// The `parts` equal blocks of a fused layer's output (one GEMM on a device).
    pub fn forward_split(&self, be: &B, x: &B::Tensor, parts: usize) -> Result<Vec<B::Tensor>> {
        Ok(be.linear_split(x, &self.weight, self.bias.as_ref(), parts)?)
    }
}

/// Concatenates 2-D tensors along rows (fused projections).
fn cat_rows(parts: &[HostTensor]) -> HostTensor {
    let cols = parts[0].shape.get(1).copied();
    let rows: usize = parts.iter().map(|p| p.shape[0]).sum();
    let shape = match cols {
        Some(c) => vec![rows, c],
        None => vec![rows],
    };
    HostTensor::new(
        shape,
        parts.iter().flat_map(|p| p.data.iter().copied()).collect(),
    )
}

/// `[in, out]` → `[out, in]` (GPT-2 Conv1D weights).
fn transpose(t: &HostTensor) -> HostTensor {
    let (r, c) = (t.shape[0], t.shape[1]);
    let mut data = vec![0f32; r * c];
    for i in 0..r {
        for j in 0..c {
            data[j * r + i] = t.data[i * c + j];
        }
    }
    HostTensor::new(vec![c, r], data)
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
