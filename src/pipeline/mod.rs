//! Running jobs over files: the continuous-batching scheduler ([`scheduler`]), the
//! one file runner of every job ([`files`]: parts, resume, shards), and what every
//! run shares ([`control`]: Ctrl-C, progress bar, shards).

pub mod control;
pub mod files;
pub mod scheduler;

pub use scheduler::{run, Admission, Finished, PipelineStats, SchedulerConfig};
