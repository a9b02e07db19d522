//! The integration tests as one binary: a module per area, each in its file under
//! tests/ (`cargo test --release --test integration -- lepus_parity::` runs one area).
//! One binary links arrow, parquet and tokenizers once, where a binary per file linked
//! them 22 times. `gpu_parity` and `cuda_probe` stay binaries of their own: the GPU
//! kit (tools/gpu/pack.sh) ships them to the device machine.

mod common;

mod beam_cli;
mod beam_parity;
mod bert_parity;
mod classify_cli;
mod config_defaults;
mod data_safety_cli;
mod deberta_parity;
mod decoder_parity;
mod efficientrag_parity;
mod embed_cli;
mod error_chain;
mod gguf_dequant;
mod hub_cli;
mod import_eval;
mod jobs_api;
mod label_cli;
mod lepus_parity;
mod llm_reranker_parity;
mod loglik_cli;
mod rerank_cli;
mod reranker_parity;
mod review_cli;
mod smollm2_parity;
mod t5_parity;
mod tokenizer_parity;
