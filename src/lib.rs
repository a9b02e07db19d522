//! hopscore: batch scoring of multi-hop passage chains for question answering.
//!
//! Data flows `io → text → model (on a backend) → io`; see docs/architecture.md for the
//! full pipeline. The API is [`jobs`]: a job built once from a
//! config, fed Arrow record batches, yielding Arrow record batches (docs/library.md);
//! [`pipeline`] runs jobs over files, and [`cli`] is arguments and one call per
//! command.

pub mod backend;
pub mod bench;
#[cfg(feature = "cli")]
pub mod cli;
pub mod io;
pub mod jobs;
pub mod metrics;
pub mod model;
pub mod options;
pub mod pipeline;
pub mod post;
pub mod quant;
pub mod retrieve;
pub mod stop;
pub mod strategy;
pub mod tensor;
pub mod text;
