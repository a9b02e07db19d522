//! Parquet input and output: column access with clear type errors, writers with
//! run metadata, the quarantine file for rows that cannot be scored, the question file
//! schema, and the importers for native HotpotQA / MuSiQue / 2Wiki files.

pub mod columns;
pub mod import;
pub mod json_records;
pub mod parquet_io;
pub mod parts;
pub mod quarantine;
pub mod questions;
