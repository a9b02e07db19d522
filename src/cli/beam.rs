//! `hopscore beam`: the arguments of the beam job ([`crate::jobs::beam`]) and its run
//! over a question file ([`crate::pipeline::files`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::question_run::{RunArgs, RunSummary};
use super::DeviceOpts;
use crate::jobs::beam::{self, BeamConfig, Hops};
use crate::jobs::device::with_backend;
use crate::jobs::options::Options;
use crate::pipeline::files;

#[derive(Debug, Clone, Args)]
pub struct BeamArgs {
    /// Beam Retrieval checkpoint directory (config.json + safetensors with the
    /// `hop_classifier_layer` and `hop_n_classifier_layer` heads).
    #[arg(long, env = "HOPSCORE_MODEL", value_parser = super::flags::model_path)]
    pub model: PathBuf,
    /// tokenizer.json (or its directory) when the model directory has none.
    #[arg(long, env = "HOPSCORE_TOKENIZER", value_parser = super::flags::tokenizer_path)]
    pub tokenizer: Option<PathBuf>,
    /// Beams kept per hop (the official models were trained with 1 or 2).
    #[arg(long, default_value_t = BeamConfig::defaults().beam_size, value_parser = super::flags::positive_usize)]
    pub beam_size: usize,
    /// Hop count: a number, `from-data` (the question file's `hops`, as the official
    /// evaluation does), or `auto` (the paper's τ rule, with --tau and --max-hops).
    #[arg(long, default_value_t = BeamConfig::defaults().hops, value_parser = str::parse::<Hops>)]
    pub hops: Hops,
    /// `--hops auto`: continue while the best score of a hop is at least this.
    #[arg(long, default_value_t = BeamConfig::defaults().tau, allow_hyphen_values = true, value_parser = super::flags::finite_f32)]
    pub tau: f32,
    /// `--hops auto`: most hops searched (truncation budgets use this count).
    #[arg(long, default_value_t = BeamConfig::defaults().max_hops, value_parser = super::flags::positive_usize)]
    pub max_hops: usize,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub device: DeviceOpts,
}

impl BeamArgs {
    /// The library's config of the job.
    pub fn config(&self) -> BeamConfig {
        BeamConfig {
            model: self.model.clone(),
            tokenizer: self.tokenizer.clone(),
            beam_size: self.beam_size,
            hops: self.hops,
            tau: self.tau,
            max_hops: self.max_hops,
            scheduler: self.run.scheduler(),
        }
    }
}

/// Runs `hopscore beam`.
pub fn run(args: &BeamArgs) -> Result<RunSummary> {
    crate::pipeline::control::install_interrupt_handler();
    let run = args.run.file_run(super::inputs(&[
        ("--model", Some(&args.model)),
        ("--tokenizer", args.tokenizer.as_deref()),
    ]));
    run.check_paths(&[])?;
    with_backend!(owned &args.device.config(), be => {
        let mut job = beam::job(args.config(), be)?;
        files::run(&mut job, &run)
    })
}

impl super::Run for BeamArgs {
    fn run(&self) -> Result<i32> {
        Ok(super::question_run::report(&run(self)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_hops(s: &str) -> Result<Hops, String> {
        s.parse()
    }

    #[test]
    fn hops_flag_parses() {
        assert_eq!(parse_hops("3"), Ok(Hops::Fixed(3)));
        assert_eq!(parse_hops("from-data"), Ok(Hops::FromData));
        assert_eq!(parse_hops("auto"), Ok(Hops::Auto));
        assert!(parse_hops("0").is_err() && parse_hops("two").is_err());
    }
}
