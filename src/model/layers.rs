//! Building blocks shared by the models: `Linear` (plain, row-fused or GPT-2 Conv1D),
//! the gated MLPs' `GateUp` and `LayerNorm`, loaded from a [`Weights`] view and run
//! through a [`Backend`].

use std::borrow::Cow;

use anyhow::Result;

use super::weights::Weights;
use crate::backend::{AddNorm, Backend, Dense, Gate, Gated};
use crate::quant::QuantRows;
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
        let (weight, bias) = fused_host(w, names, input, bias)?;
        Self::from_host(be, &weight, bias.as_ref())
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

/// A gated MLP's gate and up projections (`[inter, input]` each) as one weight, its
/// rows in the blocks [`Gated`] lays out, so that one GEMM and its epilogue give
/// `act(gate) · up` (Llama's `down(silu(gate) · up)`, T5's gated `wi_0`/`wi_1`).
pub struct GateUp<B: Backend> {
    linear: Linear<B>,
    gated: Gated,
}

impl<B: Backend> GateUp<B> {
    /// Loads `<w>.<gate>` and `<w>.<up>` (with their biases when `bias`).
    pub fn load(
        be: &B,
        w: &Weights,
        [gate_name, up_name]: [&str; 2],
        gate: Gate,
        inter: usize,
        input: usize,
        bias: bool,
    ) -> Result<Self> {
        let (weight, bias) = fused_host(w, &[(gate_name, inter), (up_name, inter)], input, bias)?;
        Self::from_host(be, &weight, bias.as_ref(), gate, inter)
    }

    /// From a host weight `[2·inter, input]` (gate rows, then up rows) and its bias, as
    /// one checkpoint tensor holds them (ModernBERT's `Wi`).
    pub fn from_host(
        be: &B,
        weight: &HostTensor,
        bias: Option<&HostTensor>,
        gate: Gate,
        inter: usize,
    ) -> Result<Self> {
        let gated = Gated::new(gate, inter);
        let rows = gated.source_rows(inter);
        Ok(Self {
            linear: Linear::from_host(
                be,
                &weight.select_rows(&rows),
                bias.map(|b| b.select_rows(&rows)).as_ref(),
            )?,
            gated,
        })
    }

    /// `act(x · gateᵀ) · (x · upᵀ)` (biases included), `[rows, inter]`.
    pub fn forward(&self, be: &B, x: &B::Tensor) -> Result<B::Tensor> {
        let Linear { weight, bias } = &self.linear;
        Ok(be.linear_gated(x, weight, bias.as_ref(), self.gated)?)
    }
}

/// `names` (each `[out_k, input]`) and, when `bias`, their biases, fused along rows.
fn fused_host(
    w: &Weights,
    names: &[(&str, usize)],
    input: usize,
    bias: bool,
) -> Result<(HostTensor, Option<HostTensor>)> {
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
    Ok((cat_rows(&ws), bs.as_ref().map(|b| cat_rows(b))))
}

/// Concatenates 2-D tensors along rows (fused projections).
fn cat_rows(parts: &[HostTensor]) -> HostTensor {
    let cols = parts[0].shape.get(1).copied();
    let rows: usize = parts.iter().map(|p| p.shape[0]).sum();
    let shape = match cols {
        Some(c) => vec![rows, c],
        None => vec![rows],
    };
    let t = HostTensor::new(
        shape,
        parts.iter().flat_map(|p| p.data.iter().copied()).collect(),
    );
    match cat_stored(parts) {
        Some(stored) => t.with_stored(stored),
        None => t,
    }
}

/// The stored blocks of fused weights: when some parts have 32-weight blocks (a GGUF
/// `Q4_K_M` mixes `Q4_K` and `Q6_K`), the others are quantised to `Q8_0`-style blocks
/// so the fused layer keeps the stored ones exact.
fn cat_stored(parts: &[HostTensor]) -> Option<QuantRows> {
    let block = parts.iter().find_map(|p| p.stored.as_ref())?.block;
    let all: Vec<Cow<QuantRows>> = parts
        .iter()
        .map(|p| match (&p.stored, &p.shape[..]) {
            (Some(stored), _) => Some(Cow::Borrowed(&**stored)),
            (None, &[rows, cols]) => {
                Some(Cow::Owned(QuantRows::quantize(&p.data, rows, cols, block)))
            }
            (None, _) => None,
        })
        .collect::<Option<_>>()?;
    QuantRows::cat(&all.iter().map(AsRef::as_ref).collect::<Vec<_>>())
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

    /// `LN(linear(input) + residual)`: a post-LN layer's output projection and this
    /// norm after it, as one op ([`Backend::linear_add_norm`]).
    pub fn forward_linear(
        &self,
        be: &B,
        linear: &Linear<B>,
        input: &B::Tensor,
        residual: &B::Tensor,
    ) -> Result<B::Tensor> {
        let norm = AddNorm {
            residual,
            weight: &self.weight,
            bias: &self.bias,
            eps: self.eps,
        };
        Ok(be.linear_add_norm(input, &linear.weight, linear.bias.as_ref(), &norm)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_weights_keep_stored_blocks_and_quantise_the_rest() {
        let w: Vec<f32> = (0..2 * 64).map(|i| (i as f32 * 0.61).cos()).collect();
        let stored = QuantRows::quantize(&w, 2, 64, 32);
        let q = HostTensor::new(vec![2, 64], stored.dequantize()).with_stored(stored);
        let plain = HostTensor::new(vec![1, 64], (0..64).map(|i| i as f32 / 64.0).collect());
        let fused = cat_rows(&[q.clone(), plain.clone()]);
        let blocks = fused.stored.as_ref().unwrap();
        assert_eq!(blocks.rows, 3);
        let deq = blocks.dequantize();
        assert_eq!(deq[..128], q.data[..]);
        for (a, b) in deq[128..].iter().zip(&plain.data) {
            assert!(
                (a - b).abs() <= 0.5 / 127.0 * 63.0 / 64.0 + 1e-7,
                "{a} vs {b}"
            );
        }
        assert!(cat_rows(&[plain.clone(), plain]).stored.is_none());
    }
}
