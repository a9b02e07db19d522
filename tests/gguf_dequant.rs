//! GGUF dequantisation of every supported ggml type against the `gguf` Python
//! package's `dequantize` on random blocks (tests/fixtures/gguf/dequant.safetensors,
//! written by tools/goldens/make_decoder_goldens.py). Exact up to f32 rounding (≤ 1e-6 relative).
//! The types of 32-weight blocks dequantise through their stored blocks
//! (`GgmlType::quant_rows`), so these cases check the blocks as well.

use hopscore::model::gguf::GgmlType;
use safetensors::SafeTensors;

fn case(name: &str, ty: GgmlType) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf/dequant.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let raw = st.tensor(&format!("{name}.raw")).unwrap();
    let want: Vec<f32> = st
        .tensor(&format!("{name}.f32"))
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let got = ty.dequantize(raw.data());
    assert_eq!(got.len(), want.len(), "{name}: element count");
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs().max(1.0),
            "{name}[{i}]: {a} vs gguf {b}"
        );
    }
}

#[test]
fn f32() {
    case("F32", GgmlType::F32);
}
#[test]
fn f16() {
    case("F16", GgmlType::F16);
}
#[test]
fn bf16() {
    case("BF16", GgmlType::BF16);
}
#[test]
fn q8_0() {
    case("Q8_0", GgmlType::Q8_0);
}
#[test]
fn q4_0() {
    case("Q4_0", GgmlType::Q4_0);
}
#[test]
fn q4_1() {
    case("Q4_1", GgmlType::Q4_1);
}
#[test]
fn q4_k() {
    case("Q4_K", GgmlType::Q4K);
}
#[test]
fn q5_k() {
    case("Q5_K", GgmlType::Q5K);
}
#[test]
fn q6_k() {
    case("Q6_K", GgmlType::Q6K);
}
#[test]
fn q5_0() {
    case("Q5_0", GgmlType::Q5_0);
}
#[test]
fn q5_1() {
    case("Q5_1", GgmlType::Q5_1);
}
