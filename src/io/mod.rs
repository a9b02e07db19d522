//! Parquet input and output: column access with clear type errors, atomic writers with
//! run metadata, the output schemas of the jobs, the guard against outputs that
//! overwrite inputs, run fingerprints, the quarantine file for rows that cannot be
//! scored, the question file schema, and the importers for native HotpotQA / MuSiQue /
//! 2Wiki files.

pub mod atomic;
pub mod columns;
pub mod fingerprint;
pub mod import;
pub mod importer;
pub mod json_records;
pub mod merge;
pub mod metadata;
pub mod parquet_io;
pub mod parts;
pub mod paths;
pub mod quarantine;
pub mod questions;
pub mod schemas;
pub mod shard;
