//! The settings of a lepus run: its config (the flags of `hopscore lepus`), and the
//! instruction templates and demonstrations it reads before any model loads.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::io::paths::Named;
use crate::model::hub::Need;
use crate::options::{self, Options};
use crate::pipeline::SchedulerConfig;
use crate::strategy::lepus::{
    parse_templates, with_demos, Demo, Ensemble, InstructionPosition, Template,
    DEFAULT_INSTRUCTIONS,
};
use crate::text::causal_tokenizer::CausalTokenizer;
use crate::text::prompt::shorten;

/// Which scorer ranks the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum LepusScorer {
    Lm,
    Bm25,
}

/// What to load and how to rank: the flags of `hopscore lepus` and the options of
/// Python's `hopscore.Lepus`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct LepusConfig {
    /// A GGUF file, a directory holding one, or an HF directory (config.json,
    /// model.safetensors, tokenizer.json) of a causal LM or a T5-family
    /// encoder-decoder. Not needed with `--scorer bm25`.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_MODEL", value_parser = crate::options::values::model_path))]
    pub model: Option<PathBuf>,
    /// tokenizer.json (or a directory holding it) instead of the model's own.
    #[cfg_attr(feature = "cli", arg(long, env = "HOPSCORE_TOKENIZER",
        value_parser = crate::options::values::model_path))]
    pub tokenizer: Option<PathBuf>,
    /// `lm`: LEPUS with the language model; `bm25`: BM25 (Lucene scoring, k1 0.9, b 0.4)
    /// of the question against each passage's title and text, no model (a baseline).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = LepusConfig::defaults().scorer))]
    pub scorer: LepusScorer,
    /// Instruction file (see src/strategy/lepus_instructions.txt for the format).
    /// Default: hopscore's own instruction set.
    #[cfg_attr(feature = "cli", arg(long))]
    pub templates: Option<PathBuf>,
    /// Templates used (the first N of the set); scores are combined by --ensemble.
    /// 1 is the official code's default; each template multiplies the work.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().num_templates,
        value_parser = crate::options::values::positive_usize))]
    pub num_templates: usize,
    /// Where instruction lines go relative to the documents.
    #[cfg_attr(feature = "cli", arg(long, value_enum,
        default_value_t = LepusConfig::defaults().instruction_position))]
    pub instruction_position: InstructionPosition,
    /// Ensemble over templates of single-document scores (paper: max is better;
    /// official default: mean).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = LepusConfig::defaults().ensemble))]
    pub ensemble: Ensemble,
    /// Ensemble over templates of path scores (the official code always uses mean).
    #[cfg_attr(feature = "cli", arg(long, value_enum,
        default_value_t = LepusConfig::defaults().path_ensemble))]
    pub path_ensemble: Ensemble,
    /// K1: the best single documents expanded into two-document paths.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().first_hops,
        value_parser = crate::options::values::positive_usize))]
    pub first_hops: usize,
    /// K2: second documents per expanded document (the TF-IDF best of the pool).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().second_hops))]
    pub second_hops: usize,
    /// Prepend `Title: {title}. ` to every document.
    #[cfg_attr(feature = "cli", arg(long))]
    pub title: bool,
    /// Documents are cut to this many tokens.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().max_doc_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub max_doc_tokens: usize,
    /// Prompt + question are cut to this many tokens (the question's tail is lost, as
    /// in the official code); a prompt that leaves no question token fails the
    /// question.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().max_prompt_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub max_prompt_tokens: usize,
    /// Logits are divided by T before the log-softmax (1.4 is best in the paper).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().temperature,
        value_parser = crate::options::values::positive_f32))]
    pub temperature: f32,
    /// Sequences of one batch that share at least N leading tokens (LEPUS paths with
    /// the same first passage) run those tokens through the model once; scores are
    /// unchanged. 0 turns the reuse off.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().min_shared_prefix))]
    pub min_shared_prefix: usize,
    /// In-context demonstrations: a JSON list of `{"question": …, "gold_path_texts":
    /// [...]}` (the official demos file). Each set of --demo-ids goes before every
    /// template, each demonstration as the template on its gold path and its question.
    #[cfg_attr(feature = "cli", arg(long))]
    pub demos: Option<PathBuf>,
    /// The demonstrations of one set, by position in --demos (`0,1`: the first two).
    /// Repeat for an ensemble of sets, combined like templates (--ensemble).
    #[cfg_attr(feature = "cli", arg(long, default_value = "0,1",
        value_parser = crate::options::values::positions))]
    pub demo_ids: Vec<Vec<usize>>,
    /// Cut each demonstration's texts to --demo-max-doc-tokens tokens (the official
    /// `--truncate_demos`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub truncate_demos: bool,
    /// With --truncate-demos: the tokens each demonstration's texts keep.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = LepusConfig::defaults().demo_max_doc_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub demo_max_doc_tokens: usize,
    /// With --demos, prompt + question are cut to this many tokens instead of
    /// --max-prompt-tokens (the official code's demo_max_prompt_len).
    #[cfg_attr(feature = "cli", arg(long,
        default_value_t = LepusConfig::defaults().demo_max_prompt_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub demo_max_prompt_tokens: usize,
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub scheduler: SchedulerConfig,
}

impl LepusConfig {
    /// The prompt budget a run uses: `demo_max_prompt_tokens` with demonstrations.
    pub fn prompt_tokens(&self) -> usize {
        match self.demos {
            Some(_) => self.demo_max_prompt_tokens,
            None => self.max_prompt_tokens,
        }
    }

    /// The defaults (the command line's) for `model`.
    pub fn new(model: PathBuf) -> Self {
        Self {
            model: Some(model),
            ..Self::defaults()
        }
    }
}

impl Options for LepusConfig {
    /// Every option at the command line's default; no model.
    fn defaults() -> Self {
        Self {
            model: None,
            tokenizer: None,
            scorer: LepusScorer::Lm,
            templates: None,
            num_templates: 1,
            instruction_position: InstructionPosition::After,
            ensemble: Ensemble::Mean,
            path_ensemble: Ensemble::Mean,
            first_hops: 5,
            second_hops: 3,
            title: false,
            max_doc_tokens: 230,
            max_prompt_tokens: 600,
            temperature: 1.0,
            min_shared_prefix: crate::model::decoder::MIN_SHARED_PREFIX,
            demos: None,
            demo_ids: vec![vec![0, 1]],
            truncate_demos: false,
            demo_max_doc_tokens: 100,
            demo_max_prompt_tokens: 1024,
            scheduler: SchedulerConfig::default(),
        }
    }

    fn check(&self) -> Result<()> {
        options::at_least_one("num_templates", self.num_templates)?;
        options::at_least_one("first_hops", self.first_hops)?;
        options::at_least_one("max_doc_tokens", self.max_doc_tokens)?;
        options::at_least_one("max_prompt_tokens", self.max_prompt_tokens)?;
        options::at_least_one("demo_max_doc_tokens", self.demo_max_doc_tokens)?;
        options::at_least_one("demo_max_prompt_tokens", self.demo_max_prompt_tokens)?;
        if self.demo_ids.is_empty() || self.demo_ids.iter().any(Vec::is_empty) {
            anyhow::bail!("--demo-ids (demo_ids): every set needs at least one demonstration");
        }
        options::finite("temperature", self.temperature, true)?;
        if self.scorer == LepusScorer::Bm25 {
            // `model` stays out: HOPSCORE_MODEL may be set for other runs.
            let lm_only = [
                "tokenizer",
                "templates",
                "num_templates",
                "instruction_position",
                "ensemble",
                "path_ensemble",
                "first_hops",
                "second_hops",
                "title",
                "max_doc_tokens",
                "max_prompt_tokens",
                "temperature",
                "min_shared_prefix",
                "demos",
                "demo_ids",
                "truncate_demos",
                "demo_max_doc_tokens",
                "demo_max_prompt_tokens",
            ];
            options::unused_in_mode(self, "--scorer bm25", "--scorer lm", &lm_only)?;
        }
        self.scheduler.check()
    }

    fn model_paths(&mut self) -> Vec<(&mut PathBuf, Need)> {
        options::model_and_tokenizer(self.model.as_mut(), self.tokenizer.as_mut())
    }

    fn inputs(&self) -> Vec<Named> {
        options::named(&[
            ("--model", self.model.as_deref()),
            ("--tokenizer", self.tokenizer.as_deref()),
            ("--templates", self.templates.as_deref()),
            ("--demos", self.demos.as_deref()),
        ])
    }
}

/// The instruction templates of a run and its demonstration sets (empty without
/// `--demos`).
pub struct Templates {
    pub instructions: Vec<Template>,
    pub demo_sets: Vec<Vec<Demo>>,
}

/// Checks the settings of `config` and reads its instruction templates and
/// demonstrations (before any model loads).
pub fn templates(config: &LepusConfig) -> Result<Templates> {
    config.check()?;
    model_path(config)?;
    let instructions = match &config.templates {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("cannot read --templates {}", p.display()))?,
        None => DEFAULT_INSTRUCTIONS.to_string(),
    };
    let instructions = parse_templates(
        &instructions,
        config.instruction_position,
        config.num_templates,
    )
    .map_err(anyhow::Error::msg)?;
    let demo_sets = match &config.demos {
        Some(path) => demo_sets(path, &config.demo_ids)?,
        None => Vec::new(),
    };
    Ok(Templates {
        instructions,
        demo_sets,
    })
}

/// The demonstration sets `ids` picks from the demos file `path`.
fn demo_sets(path: &Path, ids: &[Vec<usize>]) -> Result<Vec<Vec<Demo>>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --demos {}", path.display()))?;
    let demos: Vec<Demo> = serde_json::from_str(&text).with_context(|| {
        format!(
            "--demos {}: expected a JSON list of {{\"question\": …, \"gold_path_texts\": [...]}}",
            path.display()
        )
    })?;
    ids.iter()
        .map(|set| {
            set.iter()
                .map(|&i| {
                    demos.get(i).cloned().with_context(|| {
                        format!(
                            "--demo-ids: demonstration {i} is not in {} ({} demonstrations)",
                            path.display(),
                            demos.len()
                        )
                    })
                })
                .collect()
        })
        .collect()
}

/// The templates a run scores with: the instructions, or with demonstrations the
/// instructions behind each set ([`with_demos`]), their texts cut to
/// `demo_max_doc_tokens` first when `truncate_demos` is set.
pub fn demo_templates(
    config: &LepusConfig,
    templates: Templates,
    tok: &CausalTokenizer,
    trailing: usize,
) -> Result<Vec<Template>> {
    if templates.demo_sets.is_empty() {
        return Ok(templates.instructions);
    }
    let mut sets = templates.demo_sets;
    if config.truncate_demos {
        for d in sets.iter_mut().flatten() {
            for text in &mut d.gold_path_texts {
                *text = shorten(tok, text, config.demo_max_doc_tokens, trailing)?;
            }
        }
    }
    Ok(with_demos(&templates.instructions, &sets))
}

pub(super) fn model_path(config: &LepusConfig) -> Result<&Path> {
    config
        .model
        .as_deref()
        .context("--model is required with --scorer lm (a GGUF file or HF directory)")
}
