//! The library's config constructors (`BeamConfig::new`, …) promise "the CLI's
//! defaults"; both are written by hand, so this holds them together, field by field
//! (their `Debug` forms), for every scoring job (issue 23, item 3: until one source of
//! defaults serves both, a drift fails here).

use clap::Parser;
use hopscore::cli::{Cli, Command};
use hopscore::jobs::{
    beam::BeamConfig, classify::ClassifyConfig, embed::EmbedConfig, label::LabelConfig,
    lepus::LepusConfig, loglik::LoglikConfig,
};

/// The subcommand parsed from `args` plus an input and an output.
fn parse(args: &[&str]) -> Command {
    let argv = ["hopscore"].iter().chain(args).chain(&[
        "--input",
        "in.parquet",
        "--output",
        "out.parquet",
    ]);
    Cli::try_parse_from(argv).unwrap().command
}

/// Parses `$args` as `Command::$variant` and compares its config with `$library`.
macro_rules! same_defaults {
    ($args:expr, $variant:ident, $library:expr) => {
        match parse($args) {
            Command::$variant(a) => {
                assert_eq!(format!("{:?}", a.config()), format!("{:?}", $library))
            }
            _ => unreachable!(),
        }
    };
}

#[test]
fn library_config_constructors_equal_the_cli_defaults() {
    same_defaults!(&["beam", "--model", "m"], Beam, BeamConfig::new("m".into()));
    same_defaults!(
        &["label", "--labeler", "l", "--filter", "f"],
        Label,
        LabelConfig::new("l".into(), "f".into())
    );
    same_defaults!(
        &["lepus", "--model", "m"],
        Lepus,
        LepusConfig::new("m".into())
    );
    same_defaults!(
        &["classify", "--model", "m"],
        Classify,
        ClassifyConfig::new("m".into())
    );
    same_defaults!(
        &["loglik", "--model", "m"],
        Loglik,
        LoglikConfig::new("m".into())
    );
    same_defaults!(
        &["embed", "--model", "m"],
        Embed,
        EmbedConfig::new("m".into())
    );
}
