//! Element types of device tensors and their host encodings.

/// Element type of device activations and weights (accumulation is always f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    Bf16,
    F16,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::Bf16 | DType::F16 => 2,
        }
    }

    /// Suffix of the kernel entry points for this type (`layer_norm_bf16`).
    pub fn suffix(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
        }
    }

    /// Host f32 values as little-endian bytes of this type (round to nearest even).
    pub fn encode(self, values: &[f32]) -> Vec<u8> {
        match self {
            DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::Bf16 => values
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
            DType::F16 => values
                .iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
        }
    }

    /// Bytes of this type back to f32.
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        match self {
            DType::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            DType::Bf16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            DType::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trips_by_type() {
        let v = [1.0f32, -2.5, 3.140625, 65504.0];
        for dt in [DType::F32, DType::Bf16, DType::F16] {
            let back = dt.decode(&dt.encode(&v));
            assert_eq!(back.len(), v.len());
            for (a, b) in v.iter().zip(&back) {
                let tol = if dt == DType::F32 {
                    0.0
                } else {
                    a.abs() / 128.0
                };
                assert!((a - b).abs() <= tol, "{dt:?}: {a} vs {b}");
            }
        }
        assert_eq!(DType::Bf16.encode(&[1.0]), vec![0x80, 0x3f]);
    }
}
