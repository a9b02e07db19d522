//! Text → token ids: the tokenizer wrappers (tokenizers crate, `tokenizer.json` or
//! GGUF metadata).

pub mod causal_tokenizer;
pub mod render;
pub mod tokenizer;
pub mod words;

pub use tokenizer::TextTokenizer;
