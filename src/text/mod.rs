//! Text → token ids: the tokenizer wrapper (tokenizers crate, `tokenizer.json`).

pub mod render;
pub mod tokenizer;

pub use tokenizer::TextTokenizer;
