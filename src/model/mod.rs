//! Model definitions, written once against the [`crate::backend::Backend`] ops.

pub mod batch;
pub mod bert;
pub mod config;
pub mod cross_encoder;
pub mod deberta;
pub mod decoder;
pub mod decoder_config;
pub mod gguf;
pub mod heads;
pub mod hub;
pub mod language_model;
pub mod layers;
pub mod modernbert;
pub mod prefix;
pub mod roberta;
pub mod t5;
pub mod weights;
