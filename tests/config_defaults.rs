//! One source of defaults: the library's configs (`BeamConfig::new`, …, built on
//! `Options::defaults`), the CLI's flags (clap's defaults read the same) and Python's
//! keyword arguments (`JobConfig::from_options`) give the same config, field by field
//! (their `Debug` forms), for every job, `review` included. The models are hub ids that
//! exist nowhere: parsing checks their syntax only (nothing is fetched or created).

use clap::Parser;
use hopscore::cli::{Cli, Command};
use hopscore::jobs::{
    beam::BeamConfig, classify::ClassifyConfig, embed::EmbedConfig, label::LabelConfig,
    lepus::LepusConfig, loglik::LoglikConfig, rerank::RerankConfig, review::ReviewConfig,
    review::ReviewStrategy,
};
use hopscore::jobs::{DeviceConfig, JobConfig};

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

/// The job config and device the CLI parses from `args`.
fn cli_config(args: &[&str]) -> (JobConfig, DeviceConfig) {
    let Command::Job(job) = parse(args) else {
        unreachable!("{args:?} is not a job")
    };
    job.into_config()
}

#[test]
fn library_config_constructors_equal_the_cli_defaults() {
    let cases = [
        (
            vec!["beam", "--model", "org/m"],
            JobConfig::new(BeamConfig::new("org/m".into())),
        ),
        (
            vec!["label", "--labeler", "org/l", "--filter", "org/f"],
            JobConfig::new(LabelConfig::new("org/l".into(), "org/f".into())),
        ),
        (
            vec!["lepus", "--model", "org/m"],
            JobConfig::new(LepusConfig::new("org/m".into())),
        ),
        (
            vec!["classify", "--model", "org/m"],
            JobConfig::new(ClassifyConfig::new("org/m".into())),
        ),
        (
            vec!["rerank", "--model", "org/m"],
            JobConfig::new(RerankConfig::new("org/m".into())),
        ),
        (
            vec!["loglik", "--model", "org/m"],
            JobConfig::new(LoglikConfig::new("org/m".into())),
        ),
        (
            vec!["embed", "--model", "org/m"],
            JobConfig::new(EmbedConfig::new("org/m".into())),
        ),
        (
            vec![
                "review",
                "--strategy",
                "allies",
                "--endpoint",
                "e",
                "--llm-model",
                "x",
            ],
            JobConfig::new(ReviewConfig::new(ReviewStrategy::Allies, "e", "x")),
        ),
    ];
    for (args, library) in cases {
        let (cli, device) = cli_config(&args);
        assert_eq!(format!("{cli:?}"), format!("{library:?}"));
        assert_eq!(format!("{device:?}"), format!("{:?}", DeviceConfig::CPU));
    }
}

/// The config Python's keyword arguments build (`JobConfig::from_options`) for
/// `options`, next to the one the CLI parses from `args`.
fn same_as_cli(command: &str, options: serde_json::Value, args: &[&str]) {
    let serde_json::Value::Object(options) = options else {
        unreachable!()
    };
    let (config, device) = JobConfig::from_options(command, &options).unwrap();
    let mut argv = vec![command];
    argv.extend(args);
    let (cli, cli_device) = cli_config(&argv);
    assert_eq!(format!("{config:?}"), format!("{cli:?}"), "{command}");
    assert_eq!(
        format!("{device:?}"),
        format!("{cli_device:?}"),
        "{command}"
    );
}

#[test]
fn python_options_build_the_config_the_cli_flags_do() {
    use serde_json::json;
    same_as_cli("beam", json!({"model": "org/m"}), &["--model", "org/m"]);
    same_as_cli(
        "beam",
        json!({"model": "org/m", "beam_size": 1, "hops": "auto", "tau": -0.5, "max_active": 8, "dtype": "f32"}),
        &[
            "--model",
            "org/m",
            "--beam-size",
            "1",
            "--hops",
            "auto",
            "--tau",
            "-0.5",
            "--max-active",
            "8",
            "--dtype",
            "f32",
        ],
    );
    same_as_cli(
        "beam",
        json!({"model": "org/m", "hops": 3}),
        &["--model", "org/m", "--hops", "3"],
    );
    same_as_cli(
        "lepus",
        json!({"model": "org/m", "cpu_gemm": "q8"}),
        &["--model", "org/m", "--cpu-gemm", "q8"],
    );
    same_as_cli(
        "label",
        json!({"labeler": "org/l", "filter": "org/f", "tag_pooling": "mean", "top_k": 5}),
        &[
            "--labeler",
            "org/l",
            "--filter",
            "org/f",
            "--tag-pooling",
            "mean",
            "--top-k",
            "5",
        ],
    );
    same_as_cli("lepus", json!({"scorer": "bm25"}), &["--scorer", "bm25"]);
    same_as_cli(
        "lepus",
        json!({"model": "org/m", "demos": "d.json", "demo_ids": [[0, 1], [2]], "truncate_demos": true}),
        &[
            "--model",
            "org/m",
            "--demos",
            "d.json",
            "--demo-ids",
            "0,1",
            "--demo-ids",
            "2",
            "--truncate-demos",
        ],
    );
    same_as_cli(
        "lepus",
        json!({"model": "org/m", "ensemble": "max", "instruction_position": "before", "title": true, "temperature": 0.5}),
        &[
            "--model",
            "org/m",
            "--ensemble",
            "max",
            "--instruction-position",
            "before",
            "--title",
            "--temperature",
            "0.5",
        ],
    );
    same_as_cli(
        "rerank",
        json!({"model": "org/m", "top_k": 5, "label": 1, "title_separator": ": ", "max_active": 8}),
        &[
            "--model",
            "org/m",
            "--top-k",
            "5",
            "--label",
            "1",
            "--title-separator",
            ": ",
            "--max-active",
            "8",
        ],
    );
    same_as_cli(
        "rerank",
        json!({"model": "org/m", "template": "qwen3-reranker", "instruction": "Find facts",
               "label_tokens": ["no", "yes"]}),
        &[
            "--model",
            "org/m",
            "--template",
            "qwen3-reranker",
            "--instruction",
            "Find facts",
            "--label-tokens",
            "no,yes",
        ],
    );
    same_as_cli(
        "classify",
        json!({"model": "org/m", "max_length": 128, "device": "cuda", "gpu": 1}),
        &[
            "--model",
            "org/m",
            "--max-length",
            "128",
            "--device",
            "cuda",
            "--gpu",
            "1",
        ],
    );
    same_as_cli(
        "embed",
        json!({"model": "org/m", "pooling": "cls", "normalize": false, "prefix": "passage: "}),
        &[
            "--model",
            "org/m",
            "--pooling",
            "cls",
            "--normalize",
            "off",
            "--prefix",
            "passage: ",
        ],
    );
    same_as_cli(
        "review",
        json!({"strategy": "tor", "endpoint": "e", "llm_model": "x", "widths": [4, 2], "no_cache": true, "expansion": "cot", "timeout": 5.0}),
        &[
            "--strategy",
            "tor",
            "--endpoint",
            "e",
            "--llm-model",
            "x",
            "--widths",
            "4,2",
            "--no-cache",
            "--expansion",
            "cot",
            "--timeout",
            "5",
        ],
    );
    same_as_cli(
        "loglik",
        json!({"model": "org/m", "min_shared_prefix": 0}),
        &["--model", "org/m", "--min-shared-prefix", "0"],
    );
}
