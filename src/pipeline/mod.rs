//! Running jobs over files: the continuous-batching scheduler ([`scheduler`]), the
//! file runner of the row jobs ([`rows`]), and what every run shares ([`control`]:
//! Ctrl-C, progress bar, shards).

pub mod control;
pub mod rows;
pub mod scheduler;

pub use scheduler::{run, Admission, Finished, PipelineStats, SchedulerConfig};
