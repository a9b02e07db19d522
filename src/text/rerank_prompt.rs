//! The prompts of LLM rerankers: a (query, document) pair as the token ids a decoder
//! reads before the label tokens it is scored by.
//!
//! `qwen3-reranker` is the Qwen3-Reranker model card's ("Transformers Usage",
//! huggingface.co/Qwen/Qwen3-Reranker-0.6B): a system line asking for "yes" or "no",
//! `<Instruct>: … <Query>: … <Document>: …` as the user turn, and the assistant turn
//! opened with an empty think block. As the card's `process_inputs` does, the prefix,
//! the pair and the suffix are tokenised separately and concatenated, and only the
//! pair is truncated (`max_length` − prefix − suffix tokens).

use anyhow::{bail, Result};

use super::causal_tokenizer::CausalTokenizer;

/// A named LLM reranker template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum RerankTemplate {
    /// Qwen3-Reranker (and its `*-seq-cls` conversions): scored by `no` / `yes`.
    Qwen3Reranker,
}

impl RerankTemplate {
    /// Its name on the command line and in the run metadata.
    pub fn name(self) -> &'static str {
        match self {
            Self::Qwen3Reranker => "qwen3-reranker",
        }
    }

    /// Everything before the pair.
    fn prefix(self) -> &'static str {
        match self {
            Self::Qwen3Reranker => concat!(
                "<|im_start|>system\nJudge whether the Document meets the requirements based ",
                "on the Query and the Instruct provided. Note that the answer can only be ",
                "\"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
            ),
        }
    }

    /// Everything after the pair.
    fn suffix(self) -> &'static str {
        match self {
            Self::Qwen3Reranker => "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        }
    }

    /// The task line when `--instruction` is not given.
    pub fn default_instruction(self) -> &'static str {
        match self {
            Self::Qwen3Reranker => {
                "Given a web search query, retrieve relevant passages that answer the query"
            }
        }
    }

    /// The tokens whose logits score a pair, the relevant one last.
    pub fn label_tokens(self) -> &'static [&'static str] {
        match self {
            Self::Qwen3Reranker => &["no", "yes"],
        }
    }

    /// The pair's text (the card's `format_instruction`).
    fn pair(self, instruction: &str, query: &str, document: &str) -> String {
        match self {
            Self::Qwen3Reranker => {
                format!("<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}")
            }
        }
    }
}

/// A template with its instruction, its prefix and suffix tokenised once.
pub struct RerankPrompt {
    template: RerankTemplate,
    instruction: String,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    /// Tokens left for the pair.
    room: usize,
}

impl RerankPrompt {
    /// `template` with `instruction` (default the template's), whole sequences at most
    /// `max_length` tokens.
    pub fn new(
        tok: &CausalTokenizer,
        template: RerankTemplate,
        instruction: Option<&str>,
        max_length: usize,
    ) -> Result<Self> {
        let prefix = tok.encode(template.prefix())?;
        let suffix = tok.encode(template.suffix())?;
        let fixed = prefix.len() + suffix.len();
        if fixed >= max_length {
            bail!(
                "--max-length {max_length} leaves no room for the pair: the {} template alone \
                 is {fixed} tokens",
                template.name()
            );
        }
        Ok(Self {
            template,
            instruction: instruction
                .unwrap_or(template.default_instruction())
                .to_string(),
            prefix,
            suffix,
            room: max_length - fixed,
        })
    }

    /// The instruction the prompts carry.
    pub fn instruction(&self) -> &str {
        &self.instruction
    }

    /// The ids of one pair: prefix, the pair (truncated), suffix.
    pub fn encode(&self, tok: &CausalTokenizer, query: &str, document: &str) -> Result<Vec<u32>> {
        let pair = self.template.pair(&self.instruction, query, document);
        let body = tok.encode_with_specials(&pair, Some(self.room))?;
        Ok([&self.prefix[..], &body, &self.suffix].concat())
    }
}
