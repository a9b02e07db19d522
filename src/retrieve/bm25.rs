//! Okapi BM25 over an in-memory inverted index, with Lucene's scoring
//! (`idf = ln(1 + (N − df + 0.5)/(df + 0.5))`, `tf·(k1+1)/(tf + k1·(1 − b + b·dl/avgdl))`)
//! and Anserini's defaults k1 = 0.9, b = 0.4. Query terms count once per occurrence.

use std::collections::HashMap;

use super::{content_terms, top_k, Hit};
use crate::io::questions::Passage;

/// Term-weighting parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    pub k1: f64,
    pub b: f64,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self { k1: 0.9, b: 0.4 }
    }
}

/// A BM25 index over a fixed list of documents (built once, searched many times).
#[derive(Debug, Clone)]
pub struct Bm25Index {
    params: Bm25Params,
    vocab: HashMap<String, u32>,
    /// Per term: (document, term frequency), documents ascending.
    postings: Vec<Vec<(u32, u32)>>,
    doc_len: Vec<u32>,
    avg_len: f64,
}

/// Documents indexed between two checks of the stop flag.
const STOP_EVERY: usize = 4096;

impl Bm25Index {
    /// Indexes `docs` with the default parameters.
    pub fn new<S: AsRef<str>>(docs: &[S]) -> Self {
        Self::with_params(docs, Bm25Params::default())
    }

    pub fn with_params<S: AsRef<str>>(docs: &[S], params: Bm25Params) -> Self {
        Self::build(docs, params, || Ok::<(), std::convert::Infallible>(()))
            .unwrap_or_else(|never| match never {})
    }

    /// [`Self::new`] over a corpus that may take minutes to index: a stop request
    /// (Ctrl-C) ends it within [`STOP_EVERY`] documents.
    pub fn interruptible<S: AsRef<str>>(docs: &[S]) -> Result<Self, crate::stop::Interrupted> {
        Self::build(docs, Bm25Params::default(), crate::stop::stop_point)
    }

    /// The index, `check` called every [`STOP_EVERY`] documents (its error ends it).
    fn build<S: AsRef<str>, E>(
        docs: &[S],
        params: Bm25Params,
        mut check: impl FnMut() -> Result<(), E>,
    ) -> Result<Self, E> {
        let mut vocab: HashMap<String, u32> = HashMap::new();
        let mut postings: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut doc_len = Vec::with_capacity(docs.len());
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for (d, doc) in docs.iter().enumerate() {
            if d % STOP_EVERY == 0 {
                check()?;
            }
            let words = content_terms(doc.as_ref());
            doc_len.push(words.len() as u32);
            counts.clear();
            for w in words {
                let next = vocab.len() as u32;
                let t = *vocab.entry(w).or_insert(next);
                if t as usize == postings.len() {
                    postings.push(Vec::new());
                }
                *counts.entry(t).or_default() += 1;
            }
            for (&t, &tf) in &counts {
                postings[t as usize].push((d as u32, tf));
            }
        }
        let total: u64 = doc_len.iter().map(|&l| u64::from(l)).sum();
        let avg_len = if docs.is_empty() {
            0.0
        } else {
            total as f64 / docs.len() as f64
        };
        Ok(Self {
            params,
            vocab,
            postings,
            doc_len,
            avg_len,
        })
    }

    /// Indexes a question's passages as `title text`.
    pub fn over_passages(passages: &[Passage]) -> Self {
        let docs: Vec<String> = passages
            .iter()
            .map(|p| format!("{} {}", p.title, p.text))
            .collect();
        Self::new(&docs)
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.doc_len.len()
    }

    pub fn is_empty(&self) -> bool {
        self.doc_len.is_empty()
    }

    /// BM25 score of every document that shares a term with `query` (others score 0).
    pub fn scores(&self, query: &str) -> HashMap<usize, f64> {
        let n = self.len() as f64;
        let Bm25Params { k1, b } = self.params;
        let mut acc: HashMap<usize, f64> = HashMap::new();
        for w in content_terms(query) {
            let Some(&t) = self.vocab.get(&w) else {
                continue;
            };
            let list = &self.postings[t as usize];
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(d, tf) in list {
                let tf = f64::from(tf);
                let norm = k1 * (1.0 - b + b * f64::from(self.doc_len[d as usize]) / self.avg_len);
                *acc.entry(d as usize).or_default() += idf * tf * (k1 + 1.0) / (tf + norm);
            }
        }
        acc
    }

    /// The `k` best documents for `query`, best first (ties: lower index first). Only
    /// documents sharing a term with the query are returned.
    pub fn search(&self, query: &str, k: usize) -> Vec<Hit> {
        top_k(self.scores(query), k)
    }

    /// The score of every document for `query`, in document order (0 for one that
    /// shares no term with it).
    pub fn scores_in_order(&self, query: &str) -> Vec<f64> {
        let scores = self.scores(query);
        (0..self.len())
            .map(|d| scores.get(&d).copied().unwrap_or(0.0))
            .collect()
    }

    /// Every document ranked for `query`: matching ones by score, then the rest in index
    /// order (score 0).
    pub fn rank_all(&self, query: &str) -> Vec<Hit> {
        top_k(
            self.scores_in_order(query).into_iter().enumerate(),
            self.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexing_a_corpus_checks_the_stop_flag_as_it_goes() {
        let docs: Vec<String> = (0..10_000).map(|i| format!("passage {i}")).collect();
        let mut checks = 0;
        let stop_at_second = Bm25Index::build(&docs, Bm25Params::default(), || {
            checks += 1;
            if checks == 2 {
                Err("stop")
            } else {
                Ok(())
            }
        });
        assert_eq!(stop_at_second.err(), Some("stop"));
        let mut checks = 0;
        let whole = Bm25Index::build(&docs, Bm25Params::default(), || {
            checks += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!((checks, whole.len()), (3, 10_000), "every 4096 documents");
    }

    #[test]
    fn scores_follow_the_lucene_formula() {
        let docs = [
            "Paris is the capital of France",
            "The Eiffel Tower is in Paris, Paris",
            "Berlin is the capital of Germany",
        ];
        let index = Bm25Index::new(&docs);
        // Content terms: [paris, capital, france], [eiffel, tower, paris, paris],
        // [berlin, capital, germany]; avgdl = 10/3.
        let (k1, b, avg) = (0.9, 0.4, 10.0 / 3.0);
        let idf = |df: f64| (1.0 + (3.0 - df + 0.5) / (df + 0.5)).ln();
        let part = |tf: f64, dl: f64| tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avg));
        let hits = index.search("paris capital?", 10);
        let expect0 = idf(2.0) * part(1.0, 3.0) + idf(2.0) * part(1.0, 3.0);
        let expect1 = idf(2.0) * part(2.0, 4.0);
        let expect2 = idf(2.0) * part(1.0, 3.0);
        assert_eq!(hits.iter().map(|h| h.doc).collect::<Vec<_>>(), [0, 1, 2]);
        for (h, e) in hits.iter().zip([expect0, expect1, expect2]) {
            assert!((h.score - e).abs() < 1e-12, "{} vs {e}", h.score);
        }
        assert!(index.search("the of", 10).is_empty());
        let all = index.rank_all("germany");
        assert_eq!(all.iter().map(|h| h.doc).collect::<Vec<_>>(), [2, 0, 1]);
    }
}
