//! Running jobs: the engine seam and the threads around it ([`engine`]), the
//! continuous-batching scheduler of the question jobs ([`scheduler`]), the one file
//! runner of every job ([`files`]: parts, resume, shards), and what every run shares
//! ([`control`]: Ctrl-C, progress bar, shards).

pub mod control;
pub mod engine;
pub mod files;
pub mod scheduler;

pub use engine::{Admission, Engine, Finished, PipelineStats};
pub use scheduler::{SchedulerConfig, Strategy};
