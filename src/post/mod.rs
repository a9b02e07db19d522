//! The LLM post-stage: strategies that run after the scorers and talk to a chat model
//! through an OpenAI-compatible endpoint — Tree of Reviews ([`tor`], docs/spec.md §4) and ALLIES
//! ([`allies`], docs/spec.md §5).
//!
//! The strategies see the model only through the [`Llm`] trait (one prompt in, one reply
//! out) and the passages only through the [`Retriever`] trait, so their tree and beam
//! logic runs unchanged against the HTTP client ([`client::ChatClient`], with retries and
//! the on-disk [`cache`]) or a scripted fake in the tests. Each question runs in a
//! [`Session`] that counts calls, cache hits, tokens, retries and parse failures.
//! Replies are parsed tolerantly ([`parse`]): a reply that does not follow the protocol
//! is counted and recorded, and the strategy goes on with a documented fallback.

pub mod allies;
pub mod cache;
pub mod client;
pub mod parse;
pub mod tor;

use serde::{Deserialize, Serialize};

use crate::io::questions::Passage;
use crate::retrieve::{Bm25Index, Corpus};

/// Tokens reported by the endpoint for one call (`usage` of the response; 0 when absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The reply stopped at `max_tokens` (`finish_reason: "length"`): it may be cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_at_max_tokens: bool,
}

/// One completed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub text: String,
    pub usage: Usage,
    /// Served from the response cache (no request was sent).
    pub cached: bool,
    /// Attempts that failed and were retried before this reply.
    pub retries: u32,
}

/// A call that failed for good (after the client's retries), with the reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason}")]
pub struct LlmError {
    pub reason: String,
    /// Attempts that failed before the client gave up.
    pub retries: u32,
}

/// A chat model: one user prompt in, the assistant's reply out.
pub trait Llm: Sync {
    fn chat(&self, prompt: &str) -> Result<Reply, LlmError>;
}

/// Counts of one question's calls (the per-question output columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CallStats {
    pub llm_calls: u32,
    pub cached_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub retries: u32,
}

impl std::ops::AddAssign for CallStats {
    fn add_assign(&mut self, s: Self) {
        self.llm_calls += s.llm_calls;
        self.cached_calls += s.cached_calls;
        self.prompt_tokens += s.prompt_tokens;
        self.completion_tokens += s.completion_tokens;
        self.retries += s.retries;
    }
}

/// One question's conversation with the model: calls go through it so that they are
/// counted, and parse failures are recorded in it.
pub struct Session<'a> {
    llm: &'a dyn Llm,
    pub stats: CallStats,
    /// One note per reply that did not follow its protocol: `step: what was wrong`.
    pub parse_failures: Vec<String>,
}

impl<'a> Session<'a> {
    pub fn new(llm: &'a dyn Llm) -> Self {
        Self {
            llm,
            stats: CallStats::default(),
            parse_failures: Vec::new(),
        }
    }

    /// Sends `prompt`; counts the call, its tokens (cache hits included, so the columns
    /// do not depend on the cache) and its retries.
    pub fn ask(&mut self, prompt: &str) -> Result<String, LlmError> {
        self.stats.llm_calls += 1;
        match self.llm.chat(prompt) {
            Ok(r) => {
                self.stats.cached_calls += u32::from(r.cached);
                self.stats.prompt_tokens += r.usage.prompt_tokens;
                self.stats.completion_tokens += r.usage.completion_tokens;
                self.stats.retries += r.retries;
                if r.usage.cut_at_max_tokens {
                    // Parsed all the same, and recorded: its end may be missing.
                    self.parse_failure(
                        "llm.reply",
                        "cut at --max-tokens (finish_reason: length); raise --max-tokens",
                    );
                }
                Ok(r.text)
            }
            Err(e) => {
                self.stats.retries += e.retries;
                Err(e)
            }
        }
    }

    /// Records that the reply of `step` broke its protocol.
    pub fn parse_failure(&mut self, step: &str, why: &str) {
        self.parse_failures.push(format!("{step}: {why}"));
    }
}

/// A passage the strategies can show the model: its index in the retriever's collection
/// (the question's pool or the corpus), title and text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Doc {
    pub index: usize,
    pub title: String,
    #[serde(skip)]
    pub text: String,
}

impl Doc {
    /// `title: text` (or the text alone when untitled), as the prompts show a passage.
    pub fn render(&self) -> String {
        if self.title.is_empty() {
            self.text.clone()
        } else {
            format!("{}: {}", self.title, self.text)
        }
    }
}

/// Search for new queries. The hook for a reranking stage: a retriever that reranks
/// another's hits with a loaded scorer implements this trait too.
pub trait Retriever {
    /// The `k` best passages for `query`, best first.
    fn retrieve(&self, query: &str, k: usize) -> Vec<Doc>;
    /// The passage with this index (an initial chain from `hopscore beam`).
    fn doc(&self, index: usize) -> Option<Doc>;
}

/// BM25 (`crate::retrieve`) over `title + " " + text` of a question's own passages or a
/// corpus.
pub enum Bm25Retriever<'a> {
    Pool {
        passages: &'a [Passage],
        index: Bm25Index,
    },
    Corpus(&'a Corpus),
}

impl<'a> Bm25Retriever<'a> {
    /// Indexes a question's passages.
    pub fn pool(passages: &'a [Passage]) -> Self {
        Self::Pool {
            passages,
            index: Bm25Index::over_passages(passages),
        }
    }
}

impl Retriever for Bm25Retriever<'_> {
    fn retrieve(&self, query: &str, k: usize) -> Vec<Doc> {
        let index = match self {
            Self::Pool { index, .. } => index,
            Self::Corpus(c) => &c.index,
        };
        index
            .search(query, k)
            .into_iter()
            .filter_map(|h| self.doc(h.doc))
            .collect()
    }

    fn doc(&self, index: usize) -> Option<Doc> {
        let (title, text) = match self {
            Self::Pool { passages, .. } => {
                let p = passages.get(index)?;
                (&p.title, &p.text)
            }
            Self::Corpus(c) => (c.titles.get(index)?, c.texts.get(index)?),
        };
        Some(Doc {
            index,
            title: title.clone(),
            text: text.clone(),
        })
    }
}

/// What a strategy found for one question.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `None` when no reply held an answer (the reason is in the trace).
    pub answer: Option<String>,
    /// Evidence passages (retriever indices), in the order they were accepted.
    pub evidence: Vec<usize>,
    /// The search as JSON: ToR's tree, ALLIES's beams per round.
    pub trace: serde_json::Value,
}

/// The indices of `docs` without repeats, in first-seen order.
pub fn distinct_indices<'a>(docs: impl IntoIterator<Item = &'a Doc>) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for d in docs {
        if !out.contains(&d.index) {
            out.push(d.index);
        }
    }
    out
}

/// Numbered passages, one per line: `[1] title: text`.
pub fn numbered(docs: &[Doc]) -> String {
    docs.iter()
        .enumerate()
        .map(|(i, d)| format!("[{}] {}", i + 1, d.render()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
pub(crate) mod testing {
    //! A scripted [`Llm`] for the strategies' unit tests.

    use std::sync::Mutex;

    use super::*;

    /// Replies with the first rule whose needles are all in the prompt (or the
    /// fallback), and logs every prompt.
    pub struct ScriptedLlm {
        rules: Vec<(Vec<String>, String)>,
        fallback: String,
        pub prompts: Mutex<Vec<String>>,
    }

    impl ScriptedLlm {
        pub fn new(rules: &[(&[&str], &str)], fallback: &str) -> Self {
            Self {
                rules: rules
                    .iter()
                    .map(|(needles, reply)| {
                        (
                            needles.iter().map(|n| n.to_string()).collect(),
                            reply.to_string(),
                        )
                    })
                    .collect(),
                fallback: fallback.to_string(),
                prompts: Mutex::new(Vec::new()),
            }
        }

        pub fn calls(&self) -> usize {
            self.prompts.lock().unwrap().len()
        }
    }

    /// Replies cut at `max_tokens`.
    struct CutLlm;

    impl Llm for CutLlm {
        fn chat(&self, _: &str) -> Result<Reply, LlmError> {
            Ok(Reply {
                text: "[RELEVANT] [SUPP".into(),
                usage: Usage {
                    cut_at_max_tokens: true,
                    ..Usage::default()
                },
                cached: false,
                retries: 0,
            })
        }
    }

    #[test]
    fn a_reply_cut_at_max_tokens_is_recorded() {
        let mut session = Session::new(&CutLlm);
        assert_eq!(session.ask("p").unwrap(), "[RELEVANT] [SUPP");
        assert_eq!(
            session.parse_failures,
            ["llm.reply: cut at --max-tokens (finish_reason: length); raise --max-tokens"]
        );
    }

    impl Llm for ScriptedLlm {
        fn chat(&self, prompt: &str) -> Result<Reply, LlmError> {
            self.prompts.lock().unwrap().push(prompt.to_string());
            let text = self
                .rules
                .iter()
                .find(|(needles, _)| needles.iter().all(|n| prompt.contains(n.as_str())))
                .map_or(&self.fallback, |(_, reply)| reply);
            Ok(Reply {
                text: text.clone(),
                usage: Usage {
                    prompt_tokens: 10,
                    completion_tokens: 2,
                    cut_at_max_tokens: false,
                },
                cached: false,
                retries: 0,
            })
        }
    }

    /// Passages `(title, text)` as a pool.
    pub fn pool(docs: &[(&str, &str)]) -> Vec<Passage> {
        docs.iter()
            .map(|(t, x)| Passage {
                title: t.to_string(),
                text: x.to_string(),
                sentences: None,
            })
            .collect()
    }
}
