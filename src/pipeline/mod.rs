//! Running jobs over files: the continuous-batching scheduler ([`scheduler`]), the
//! file runners of the question jobs ([`questions`]: parts, resume, shards) and of the
//! row jobs ([`rows`]), and what every run shares ([`control`]:
//! Ctrl-C, progress bar, shards).

pub mod control;
pub mod questions;
pub mod rows;
pub mod scheduler;

pub use scheduler::{run, Admission, Finished, PipelineStats, SchedulerConfig};
