//! Exact GELU, `0.5·x·(1 + erf(x/√2))`. CPU twin of `kernels/gelu.cu`.

use rayon::prelude::*;

pub fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU in place over a whole buffer.
pub fn gelu_inplace(x: &mut [f32]) {
    x.par_chunks_mut(4096)
        .for_each(|c| c.iter_mut().for_each(|v| *v = gelu_erf(*v)));
}
