//! GPT-2's tanh-approximated GELU (`gelu_new`):
//! `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`. CPU twin of `kernels/gelu_new.cu`.

use rayon::prelude::*;

/// `gelu_new` of one value.
pub fn gelu_new(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

/// `gelu_new` in place over a whole buffer.
pub fn gelu_new_inplace(x: &mut [f32]) {
    x.par_chunks_mut(4096)
        .for_each(|c| c.iter_mut().for_each(|v| *v = gelu_new(*v)));
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_values() {
        // torch.nn.functional.gelu(x, approximate="tanh") at 1.0 and -0.5.
        assert!((super::gelu_new(1.0) - 0.841_192).abs() < 1e-6);
        assert!((super::gelu_new(-0.5) + 0.154_286).abs() < 1e-6);
        assert_eq!(super::gelu_new(0.0), 0.0);
    }
}
