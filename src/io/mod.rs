//! Parquet input and output: column access with clear type errors, writers with
//! run metadata, and the quarantine file for rows that cannot be scored.

pub mod parquet_io;
pub mod quarantine;
