//! EfficientRAG's iterative retrieval (docs/spec.md §2; microsoft/EfficientRAG @6b2489f,
//! `src/efficientrag_retrieve.py::efficient_rag`) as a state machine.
//!
//! Each iteration retrieves the top-k chunks for the current query (the question at
//! first), asks the Labeler for every chunk's tag and kept tokens, and collects the
//! kept text ("info") of the `<CONTINUE>` chunks. With none, the loop stops; otherwise
//! the Filter turns `"Query: {q} " + "; ".join("Info: {info}")` into the next query.
//! At most [`MAX_ITER`] iterations. The kept passages are every retrieved chunk not
//! tagged `<TERMINATE>` (what the official QA step reads), first retrieval first.
//!
//! Inputs follow the official code: texts are split into words ([`crate::text::words`])
//! and each word is tokenised on its own; Labeler input
//! `[CLS] q_words [SEP] chunk_words [SEP]` cut to 384 tokens, Filter input
//! `[CLS] words [SEP]` cut to 128 (the final [SEP] may be cut away, as there). A token
//! is kept when its label is 1 (the argmax of its two logits, ties to 0, taken by the
//! token head); kept text is the decode of the kept ids without special tokens, with
//! transformers 4.x's clean-up. The official
//! code pads to the full length; packed sequences without padding give the same
//! logits on real tokens, and pads never reach the kept text (special tokens).
//!
//! The strategy owns text work between model calls (retrieval, word split,
//! tokenisation, decoding), but never calls a model: the pipeline batches its requests
//! with other questions'.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::batch::Sequence;
use crate::retrieve::chunks::ChunkSource;
use crate::tensor::argmax;
use crate::text::words::{clean_up_tokenization, words};
use crate::text::TextTokenizer;

/// Iterations of the official loop.
pub const MAX_ITER: usize = 4;
/// Chunks retrieved per iteration.
pub const TOP_K: usize = 10;
/// Labeler input length (special tokens included).
pub const LABELER_MAX_LEN: usize = 384;
/// Filter input length (special tokens included).
pub const FILTER_MAX_LEN: usize = 128;

// [CLS] and [SEP] ids of the DeBERTa-v3 vocabulary.
use super::beam::{CLS_ID, SEP_ID};

/// Pipeline head index of Labeler requests. Their scores are the `n_tags` tag logits
/// followed by each token's label (0.0 or 1.0).
pub const LABELER: usize = 0;
/// Pipeline head index of Filter requests. Their scores are each token's label.
pub const FILTER: usize = 1;

/// A chunk's tag (the official `TAG_MAPPING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Continue,
    Terminate,
    Finish,
}

impl Tag {
    /// The tag of a tag-head class index (2 tags: CONTINUE, TERMINATE; 3 add FINISH).
    pub fn from_class(class: usize) -> Self {
        match class {
            0 => Tag::Continue,
            1 => Tag::Terminate,
            _ => Tag::Finish,
        }
    }

    /// The official tag string.
    pub fn as_str(self) -> &'static str {
        match self {
            Tag::Continue => "<CONTINUE>",
            Tag::Terminate => "<TERMINATE>",
            Tag::Finish => "<FINISH>",
        }
    }
}

/// Loop limits.
#[derive(Debug, Clone, Copy)]
pub struct LoopConfig {
    pub max_iter: usize,
    pub top_k: usize,
    /// Classes of the Labeler's tag head (2 or 3).
    pub n_tags: usize,
}

/// One iteration of the loop.
#[derive(Debug, Clone, PartialEq)]
pub struct Iteration {
    pub query: String,
    /// Chunk indices of the source, best first.
    pub retrieved: Vec<usize>,
    /// Tag of each retrieved chunk.
    pub tags: Vec<Tag>,
    /// Tag-head logits of each retrieved chunk.
    pub tag_logits: Vec<Vec<f32>>,
    /// Kept text of each retrieved chunk.
    pub kept_text: Vec<String>,
    /// The Filter's next query (none when the loop stopped here without filtering).
    pub next_query: Option<String>,
}

/// Why the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// No chunk was tagged `<CONTINUE>`.
    NoContinue,
    /// The query shares no term with any chunk (nothing retrieved).
    NothingRetrieved,
    /// `max_iter` iterations ran.
    MaxIter,
}

impl Stop {
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::NoContinue => "no_continue",
            Stop::NothingRetrieved => "nothing_retrieved",
            Stop::MaxIter => "max_iter",
        }
    }
}

/// What the loop found for one question.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelResult {
    pub iterations: Vec<Iteration>,
    /// Chunks tagged other than `<TERMINATE>` in some iteration, first retrieval
    /// first, without repeats.
    pub kept: Vec<usize>,
    pub stop: Stop,
}

enum Pending {
    /// Labeler inputs of the retrieved chunks.
    Label(Vec<Sequence>),
    /// The Filter input.
    Filter(Sequence),
    Done,
}

/// Loop state of one question.
pub struct EfficientRag {
    config: LoopConfig,
    source: Arc<dyn ChunkSource>,
    tok: Arc<TextTokenizer>,
    /// Word-tokenised chunks seen so far.
    chunk_ids: HashMap<usize, Vec<u32>>,
    query: String,
    iterations: Vec<Iteration>,
    pending: Pending,
    outcome: Option<Result<LabelResult, String>>,
}

impl EfficientRag {
    /// Starts the loop with `question` as the first query.
    pub fn new(
        question: &str,
        source: Arc<dyn ChunkSource>,
        tok: Arc<TextTokenizer>,
        config: LoopConfig,
    ) -> Self {
        let mut s = Self {
            config,
            source,
            tok,
            chunk_ids: HashMap::new(),
            query: question.to_string(),
            iterations: Vec::new(),
            pending: Pending::Done,
            outcome: None,
        };
        s.start_iteration();
        s
    }

    /// The finished outcome (`Err` when a text could not be tokenised), once done.
    pub fn outcome(&self) -> Option<&Result<LabelResult, String>> {
        self.outcome.as_ref()
    }

    fn word_ids(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tok
            .encode_words(&words(text))
            .map_err(|e| format!("{e:#}"))
    }

    fn decode(&self, ids: impl Iterator<Item = u32>) -> Result<String, String> {
        let ids: Vec<u32> = ids.collect();
        self.tok
            .decode(&ids)
            .map(|t| clean_up_tokenization(&t))
            .map_err(|e| format!("{e:#}"))
    }

    /// Retrieves for the current query and queues the Labeler inputs, or finishes.
    fn start_iteration(&mut self) {
        if let Err(e) = self.try_start_iteration() {
            self.fail(e);
        }
    }

    fn try_start_iteration(&mut self) -> Result<(), String> {
        let retrieved = self
            .source
            .search(&self.query, self.config.top_k)
            .map_err(|e| format!("retrieval for the query `{}`: {e}", self.query))?;
        self.iterations.push(Iteration {
            query: self.query.clone(),
            retrieved: retrieved.clone(),
            tags: Vec::new(),
            tag_logits: Vec::new(),
            kept_text: Vec::new(),
            next_query: None,
        });
        if retrieved.is_empty() {
            self.finish(Stop::NothingRetrieved);
            return Ok(());
        }
        let q = self.word_ids(&self.query)?;
        let mut seqs = Vec::with_capacity(retrieved.len());
        for &doc in &retrieved {
            if !self.chunk_ids.contains_key(&doc) {
                let ids = self
                    .word_ids(&self.source.chunk(doc))
                    .map_err(|e| format!("chunk {doc}: {e}"))?;
                self.chunk_ids.insert(doc, ids);
            }
            let chunk = &self.chunk_ids[&doc];
            let ids: Vec<u32> = std::iter::once(CLS_ID)
                .chain(q.iter().copied())
                .chain([SEP_ID])
                .chain(chunk.iter().copied())
                .chain([SEP_ID])
                .take(LABELER_MAX_LEN)
                .collect();
            seqs.push(plain(ids));
        }
        self.pending = Pending::Label(seqs);
        Ok(())
    }

    /// Tags and kept texts from the Labeler's logits; queues the Filter or finishes.
    fn feed_labels(&mut self, seqs: Vec<Sequence>, logits: Vec<Vec<f32>>) -> Result<(), String> {
        let n_tags = self.config.n_tags;
        let mut infos = Vec::new();
        let it = self.iterations.len() - 1;
        for (seq, l) in seqs.iter().zip(&logits) {
            assert_eq!(l.len(), n_tags + seq.ids.len(), "Labeler scores layout");
            let (tag_logits, token_labels) = l.split_at(n_tags);
            let tag = Tag::from_class(argmax(tag_logits));
            let text = self.decode(kept_ids(&seq.ids, token_labels))?;
            if tag == Tag::Continue {
                infos.push(text.clone());
            }
            let iteration = &mut self.iterations[it];
            iteration.tags.push(tag);
            iteration.tag_logits.push(tag_logits.to_vec());
            iteration.kept_text.push(text);
        }
        if infos.is_empty() {
            self.finish(Stop::NoContinue);
            return Ok(());
        }
        // The official `filter_query` drops blank infos after the stop check.
        let infos: Vec<String> = infos
            .into_iter()
            .filter(|i| !i.trim().is_empty())
            .map(|i| format!("Info: {i}"))
            .collect();
        let sentence = format!("Query: {} {}", self.query, infos.join("; "));
        let ids: Vec<u32> = std::iter::once(CLS_ID)
            .chain(self.word_ids(&sentence)?)
            .chain([SEP_ID])
            .take(FILTER_MAX_LEN)
            .collect();
        self.pending = Pending::Filter(plain(ids));
        Ok(())
    }

    /// The next query from the Filter's logits; starts the next iteration or finishes.
    fn feed_filter(&mut self, seq: Sequence, logits: Vec<f32>) -> Result<(), String> {
        assert_eq!(logits.len(), seq.ids.len(), "Filter scores layout");
        let next = self.decode(kept_ids(&seq.ids, &logits))?;
        self.iterations
            .last_mut()
            .expect("an iteration is running")
            .next_query = Some(next.clone());
        self.query = next;
        if self.iterations.len() >= self.config.max_iter {
            self.finish(Stop::MaxIter);
        } else {
            self.start_iteration();
        }
        Ok(())
    }

    fn finish(&mut self, stop: Stop) {
        let mut kept = Vec::new();
        for it in &self.iterations {
            for (&doc, &tag) in it.retrieved.iter().zip(&it.tags) {
                if tag != Tag::Terminate && !kept.contains(&doc) {
                    kept.push(doc);
                }
            }
        }
        self.pending = Pending::Done;
        self.outcome = Some(Ok(LabelResult {
            iterations: std::mem::take(&mut self.iterations),
            kept,
            stop,
        }));
    }

    fn fail(&mut self, reason: String) {
        self.pending = Pending::Done;
        self.outcome = Some(Err(reason));
    }
}

impl crate::pipeline::Strategy for EfficientRag {
    type Output = Result<LabelResult, String>;

    fn requests(&self) -> Vec<(Sequence, usize)> {
        match &self.pending {
            Pending::Label(seqs) => seqs.iter().map(|s| (s.clone(), LABELER)).collect(),
            Pending::Filter(seq) => vec![(seq.clone(), FILTER)],
            Pending::Done => Vec::new(),
        }
    }

    fn feed(&mut self, mut logits: Vec<Vec<f32>>) {
        let result = match std::mem::replace(&mut self.pending, Pending::Done) {
            Pending::Label(seqs) => self.feed_labels(seqs, logits),
            Pending::Filter(seq) => {
                let l = logits.pop().expect("one Filter request");
                self.feed_filter(seq, l)
            }
            Pending::Done => panic!("fed after the loop finished"),
        };
        if let Err(e) = result {
            self.fail(e);
        }
    }

    fn take_output(&mut self) -> Option<Self::Output> {
        self.outcome.take()
    }
}

/// A sequence with all-ones mask and segment 0.
fn plain(ids: Vec<u32>) -> Sequence {
    Sequence {
        ids,
        ..Default::default()
    }
}

/// Ids whose token label is 1.
fn kept_ids<'a>(ids: &'a [u32], token_labels: &'a [f32]) -> impl Iterator<Item = u32> + 'a {
    ids.iter()
        .zip(token_labels)
        .filter(|(_, &l)| l == 1.0)
        .map(|(&id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Strategy;
    use crate::retrieve::chunks::PoolChunks;

    fn tokenizer() -> Arc<TextTokenizer> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("weights/deberta-v3-tokenizer/tokenizer.json");
        Arc::new(TextTokenizer::from_file(&path, None).expect("run tools/fetch_tokenizer.sh"))
    }

    fn config() -> LoopConfig {
        LoopConfig {
            max_iter: MAX_ITER,
            top_k: 2,
            n_tags: 2,
        }
    }

    /// Labeler scores: tag `tag` and every token kept when `keep`.
    fn label(seq: &Sequence, tag: usize, keep: bool) -> Vec<f32> {
        let mut l = vec![0.0; 2];
        l[tag] = 1.0;
        l.extend(seq.ids.iter().map(|_| f32::from(u8::from(keep))));
        l
    }

    /// Filter scores keeping exactly the ids of `words`.
    fn keep_words(tok: &TextTokenizer, seq: &Sequence, words: &[&str]) -> Vec<f32> {
        let keep = tok.encode_words(words).unwrap();
        seq.ids
            .iter()
            .map(|id| f32::from(u8::from(keep.contains(id))))
            .collect()
    }

    #[test]
    fn the_loop_follows_the_official_control_flow() {
        let tok = tokenizer();
        let source = Arc::new(PoolChunks::new(vec![
            "Paris: Paris is the capital of France, unlike Berlin.".into(),
            "Berlin: Berlin is in Germany.".into(),
            "Rome: Rome is old.".into(),
        ]));
        let mut s = EfficientRag::new("Where is Paris?", source, tok.clone(), config());
        // Iteration 1: only chunk 0 matches `paris`; CONTINUE, all tokens kept.
        let reqs = s.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].1, LABELER);
        let seq = &reqs[0].0;
        assert_eq!((seq.ids[0], *seq.ids.last().unwrap()), (CLS_ID, SEP_ID));
        s.feed(vec![label(seq, 0, true)]);
        // The kept text is decoded word by word and cleaned up (no space before `?`,
        // `.`; `,` was never a word); the Filter reads `Query: … Info: …`.
        let kept = "Where is Paris? Paris : Paris is the capital of France unlike Berlin.";
        let reqs = s.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].1, FILTER);
        let f = &reqs[0].0;
        let want: Vec<u32> = std::iter::once(CLS_ID)
            .chain(
                tok.encode_words(&words(&format!("Query: Where is Paris? Info: {kept}")))
                    .unwrap(),
            )
            .chain([SEP_ID])
            .collect();
        assert_eq!(f.ids, want);
        s.feed(vec![keep_words(&tok, f, &["Berlin"])]);
        // Iteration 2: `Berlin` retrieves chunks 1 then 0; TERMINATE everywhere → stop.
        let reqs = s.requests();
        assert_eq!(reqs.len(), 2);
        s.feed(reqs.iter().map(|(q, _)| label(q, 1, false)).collect());
        assert!(s.requests().is_empty());
        let r = s.take_output().unwrap().unwrap();
        assert_eq!(r.stop, Stop::NoContinue);
        assert_eq!(r.iterations.len(), 2);
        assert_eq!(r.iterations[0].query, "Where is Paris?");
        assert_eq!(r.iterations[0].kept_text, [kept]);
        assert_eq!(r.iterations[0].next_query.as_deref(), Some("Berlin"));
        assert_eq!(r.iterations[1].query, "Berlin");
        assert_eq!(r.iterations[1].retrieved, [1, 0]);
        assert_eq!(r.iterations[1].tags, [Tag::Terminate, Tag::Terminate]);
        assert_eq!(r.iterations[1].kept_text, ["", ""]);
        assert_eq!(r.iterations[1].next_query, None);
        assert_eq!(r.kept, [0]);
    }

    #[test]
    fn the_loop_stops_after_max_iter_or_when_nothing_is_retrieved() {
        let tok = tokenizer();
        let source: Arc<dyn ChunkSource> = Arc::new(PoolChunks::new(vec![
            "A: alpha beta".into(),
            "B: beta gamma".into(),
        ]));
        let mut s = EfficientRag::new("beta", source.clone(), tok.clone(), config());
        while !s.requests().is_empty() {
            let reqs = s.requests();
            let logits = match reqs[0].1 {
                LABELER => reqs.iter().map(|(q, _)| label(q, 0, true)).collect(),
                _ => vec![keep_words(&tok, &reqs[0].0, &["beta"])],
            };
            s.feed(logits);
        }
        let r = s.take_output().unwrap().unwrap();
        assert_eq!(r.stop, Stop::MaxIter);
        assert_eq!(r.iterations.len(), MAX_ITER);
        // The Filter keeps every `beta` of `Query: beta Info: …`.
        assert!(r
            .iterations
            .iter()
            .all(|it| it.query.split(' ').all(|w| w == "beta")));
        assert_eq!(r.kept, [0, 1]);

        let s = EfficientRag::new("zeta", source, tok, config());
        let r = s.outcome().unwrap().as_ref().unwrap();
        assert_eq!(r.stop, Stop::NothingRetrieved);
        assert!(r.iterations[0].retrieved.is_empty() && r.kept.is_empty());
    }

    /// A query the source cannot search (a bi-encoder that cannot embed it) fails the
    /// question with the reason, instead of ending it as if nothing were retrieved.
    #[test]
    fn a_query_the_source_cannot_search_fails_the_question() {
        struct Unsearchable;
        impl ChunkSource for Unsearchable {
            fn search(&self, _: &str, _: usize) -> Result<Vec<usize>, String> {
                Err("cannot embed the query: no tokens".into())
            }
            fn chunk(&self, _: usize) -> String {
                unreachable!("nothing was retrieved")
            }
        }
        let s = EfficientRag::new(
            "Where is Paris?",
            Arc::new(Unsearchable),
            tokenizer(),
            config(),
        );
        assert!(s.requests().is_empty());
        let err = s.outcome().unwrap().as_ref().unwrap_err();
        assert_eq!(
            err,
            "retrieval for the query `Where is Paris?`: cannot embed the query: no tokens"
        );
    }

    #[test]
    fn labeler_inputs_are_cut_to_384_tokens() {
        let long = format!("T: {}", "word ".repeat(500));
        let source = Arc::new(PoolChunks::new(vec![long]));
        let s = EfficientRag::new("word", source, tokenizer(), config());
        let reqs = s.requests();
        assert_eq!(reqs[0].0.ids.len(), LABELER_MAX_LEN);
        assert_ne!(*reqs[0].0.ids.last().unwrap(), SEP_ID);
    }
}
