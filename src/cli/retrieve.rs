//! `hopscore retrieve`: candidate pools for a question file from a passage corpus
//! ([`crate::jobs::retrieve`]): dense (an `embed` index), BM25, or both fused.

use anyhow::Result;
use clap::Args;

use crate::jobs::retrieve::{self, RetrieveConfig, RetrieveSummary};
use crate::jobs::DeviceConfig;
use crate::options::Options;

/// The flags of `hopscore retrieve`: its config's and the device's (the query encoder's).
#[derive(Debug, Clone, Args)]
pub struct RetrieveArgs {
    #[command(flatten)]
    pub config: RetrieveConfig,
    #[command(flatten)]
    pub device: DeviceConfig,
}

/// Runs `hopscore retrieve` and prints its summary; a stop (Ctrl-C, SIGTERM) writes
/// nothing and exits 130 (retrieve has no parts to resume: it runs again).
pub fn main(args: &RetrieveArgs) -> Result<i32> {
    match run(args) {
        Ok(summary) => {
            eprintln!("{summary}");
            Ok(0)
        }
        Err(e) if e.is::<crate::stop::Interrupted>() => {
            eprintln!(
                "interrupted: retrieve wrote nothing (its files are written whole at the \
                 end); run the same command again"
            );
            Ok(super::exit::INTERRUPTED)
        }
        Err(e) => Err(e),
    }
}

/// Runs `hopscore retrieve`.
pub fn run(args: &RetrieveArgs) -> Result<RetrieveSummary> {
    crate::pipeline::control::install_interrupt_handler();
    let mut config = args.config.clone();
    crate::options::resolve_models(config.model_paths())?;
    crate::jobs::device::with_backend!(owned &args.device, be => {
        retrieve::run(&config, be)
    })
}

impl std::fmt::Display for RetrieveSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "retrieved for {} questions in {:.1} s ({} quarantined → {}; scores → {})",
            self.questions,
            self.seconds,
            self.quarantined,
            self.quarantine_path.display(),
            self.scores_path.display()
        )?;
        if self.with_gold > 0 {
            let r: Vec<String> = self
                .recall
                .iter()
                .map(|(k, r)| format!("R@{k} {r:.4}"))
                .collect();
            write!(
                f,
                "\ngold passages over {} questions: {}",
                self.with_gold,
                r.join(", ")
            )?;
        }
        Ok(())
    }
}
