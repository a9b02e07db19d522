//! LEPUS prompts as model inputs (docs/spec.md §3): the prompt and the question
//! encoded for a causal LM or an encoder-decoder and cut to the prompt budget, and
//! passages shortened as the official code does.

use std::sync::Arc;

use anyhow::Result;

use super::causal_tokenizer::CausalTokenizer;
use super::words::clean_up_tokenization;
use crate::model::batch::Sequence;

/// Encodes a prompt and the question for the model, as the official
/// `score_prompt_batch` does: for a causal LM `prompt.trim() + " " + question` (prompt
/// and question tokenised separately, BOS when the tokenizer asks for it), cut to
/// `max_tokens`; for an encoder-decoder the prompt as it is (the encoder input) and the
/// question (the labels), each with the tokenizer's special tokens and cut to
/// `max_tokens` (a cut that leaves every passage's prompt the same ends the question:
/// `strategy::lepus::LepusSearch`).
pub struct LmEncoder {
    pub tok: Arc<CausalTokenizer>,
    pub max_tokens: usize,
    pub seq2seq: bool,
}

impl LmEncoder {
    fn encode_seq2seq(&self, prompt: &str, question: &str) -> Result<Sequence, String> {
        let encode = |text: &str| {
            self.tok
                .encode_with_specials(text, Some(self.max_tokens))
                .map_err(|e| format!("{e:#}"))
        };
        let (mut ids, labels) = (encode(prompt)?, encode(question)?);
        if ids.is_empty() || labels.is_empty() {
            return Err("the prompt or the question has no tokens".into());
        }
        let mut type_ids = vec![0u32; ids.len()];
        type_ids.resize(ids.len() + labels.len(), 1);
        ids.extend(labels);
        Ok(Sequence {
            ids,
            type_ids,
            mask: Vec::new(),
        })
    }
}

impl LmEncoder {
    /// The model input of `prompt` then `question` (`type_ids` 1 on the question's
    /// tokens), or why there is none.
    pub fn encode(&self, prompt: &str, question: &str) -> Result<Sequence, String> {
        if self.seq2seq {
            return self.encode_seq2seq(prompt, question);
        }
        let enc = self
            .tok
            .encode_pair(&format!("{} ", prompt.trim()), question)
            .map_err(|e| format!("{e:#}"))?;
        if enc.target_start == 0 {
            return Err("the prompt is empty and the model adds no BOS".into());
        }
        if enc.target_start >= self.max_tokens {
            return Err(format!(
                "the prompt is {} tokens: no question token fits in the prompt budget of {} \
                 (--max-prompt-tokens; --demo-max-prompt-tokens with --demos)",
                enc.target_start, self.max_tokens
            ));
        }
        let mut ids = enc.ids;
        ids.truncate(self.max_tokens);
        let mut type_ids = vec![0u32; ids.len()];
        type_ids[enc.target_start..].fill(1);
        Ok(Sequence {
            ids,
            type_ids,
            mask: Vec::new(),
        })
    }
}

/// The official `shorten_paragraph_if_necessary`: a text over `max_tokens` tokens is
/// decoded from its first `max_tokens`, with `". "` appended unless it ends with `.`.
/// `trailing` special tokens that the tokenizer appends (T5's `</s>`, which the
/// official `tokenizer.encode` adds) count toward the length.
pub fn shorten(
    tok: &CausalTokenizer,
    text: &str,
    max_tokens: usize,
    trailing: usize,
) -> Result<String> {
    let ids = crate::text::leading_ids(|t| tok.encode(t), text, max_tokens)?;
    if ids.len() + trailing <= max_tokens {
        return Ok(text.to_string());
    }
    let cut = clean_up_tokenization(&tok.decode(&ids[..max_tokens.min(ids.len())])?);
    Ok(if cut.trim().ends_with('.') {
        cut
    } else {
        format!("{cut}. ")
    })
}
