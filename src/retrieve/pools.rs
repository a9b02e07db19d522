//! A question's candidate pool from a corpus's rankings: BM25 rankings of the question
//! texts, the fusion of a dense and a lexical ranking, the hits' passages, and the
//! question with them as its pool, its gold labels carried over by passage (what
//! `hopscore retrieve` writes; the dense ranking comes from the query encoder,
//! [`super::dense::DenseIndex::search`]).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::Result;

use super::corpus::for_each_passage;
use super::dense::reciprocal_rank_fusion;
use super::Corpus;
use crate::io::questions::{gold_not_retrieved, Passage, Question};

/// The ranked hits of one question: corpus ids and scores, best first.
pub type Ranking = Vec<(String, f64)>;

/// The RRF constant of Cormack et al. (2009).
const RRF_C: f64 = 60.0;

/// The recall cut-offs reported (those ≤ k).
pub const RECALL_AT: [usize; 4] = [2, 5, 10, 20];

/// The `depth` best BM25 hits of each text over `corpus` (a stop request is taken
/// between texts).
pub fn lexical(corpus: &Corpus, texts: &[&str], depth: usize) -> Result<Vec<Ranking>> {
    texts
        .iter()
        .map(|t| {
            crate::stop::stop_point()?;
            Ok(corpus
                .index
                .search(t, depth)
                .into_iter()
                .map(|h| (corpus.ids[h.doc].clone(), h.score))
                .collect())
        })
        .collect()
}

/// The `k` best hits of each question: the reciprocal rank fusion (c = 60) of its
/// dense and lexical rankings when both are given, else the one given (every
/// retriever gives one), cut to `k`.
pub fn fuse(dense: Option<Vec<Ranking>>, lexical: Option<Vec<Ranking>>, k: usize) -> Vec<Ranking> {
    let ids = |r: &Ranking| r.iter().map(|(id, _)| id.clone()).collect();
    match (dense, lexical) {
        (Some(d), Some(l)) => d
            .iter()
            .zip(&l)
            .map(|(d, l)| reciprocal_rank_fusion(&[ids(d), ids(l)], RRF_C, k))
            .collect(),
        (Some(r), None) | (None, Some(r)) => r
            .into_iter()
            .map(|mut r| {
                r.truncate(k);
                r
            })
            .collect(),
        (None, None) => unreachable!("every retriever ranks"),
    }
}

/// Every id the rankings name.
fn hit_ids(rankings: &[Ranking]) -> HashSet<&str> {
    rankings
        .iter()
        .flatten()
        .map(|(id, _)| id.as_str())
        .collect()
}

/// The hits' passages: from `loaded` (the corpus and its row of each id) when the
/// corpus is in memory, else read from the corpus file in one pass (only they are
/// kept).
pub fn passages(
    loaded: Option<(&Corpus, &HashMap<String, usize>)>,
    corpus: &Path,
    rankings: &[Ranking],
) -> Result<HashMap<String, Passage>> {
    let wanted = hit_ids(rankings);
    if let Some((corpus, doc_of)) = loaded {
        return Ok(wanted
            .into_iter()
            .filter_map(|id| {
                let i = *doc_of.get(id)?;
                Some((id.to_string(), passage(&corpus.titles[i], &corpus.texts[i])))
            })
            .collect());
    }
    let mut out = HashMap::new();
    for_each_passage(corpus, |id, title, text| {
        if wanted.contains(id) && !out.contains_key(id) {
            out.insert(id.to_string(), passage(title, text));
        }
    })?;
    Ok(out)
}

fn passage(title: &str, text: &str) -> Passage {
    Passage {
        title: title.to_string(),
        text: text.to_string(),
        sentences: None,
    }
}

/// Running counts of a retrieval: rows read, hits left out, recall sums (per cut-off
/// of [`RECALL_AT`]).
#[derive(Debug, Default)]
pub struct Tally {
    pub seen: u64,
    /// Hits whose id the corpus lacks.
    pub unknown_hits: u64,
    /// Hits whose passage repeated a higher-ranked one's title and text.
    pub duplicate_hits: u64,
    /// Questions with gold passages, over which the recalls average.
    pub with_gold: u64,
    recall: [f64; RECALL_AT.len()],
}

impl Tally {
    /// Leaves out of `rankings` an id the corpus lacks (or holds without usable text)
    /// and a passage that repeats a higher-ranked one's title and text under another id
    /// (each copy would count as gold), counting both.
    pub fn keep_usable(&mut self, rankings: &mut [Ranking], passages: &HashMap<String, Passage>) {
        for r in rankings {
            let before = r.len();
            r.retain(|(id, _)| passages.contains_key(id));
            self.unknown_hits += (before - r.len()) as u64;
            let before = r.len();
            let mut seen = HashSet::new();
            r.retain(|(id, _)| {
                let p = &passages[id];
                seen.insert((p.title.as_str(), p.text.as_str()))
            });
            self.duplicate_hits += (before - r.len()) as u64;
        }
    }

    /// `q` with the retrieved passages as its pool; gold carried over by title and
    /// text, and a gold passage not retrieved noted in `issues` ([`gold_not_retrieved`],
    /// which `eval` counts as a miss).
    pub fn retrieved(
        &mut self,
        mut q: Question,
        ranking: &Ranking,
        passages: &HashMap<String, Passage>,
    ) -> Question {
        let gold: Vec<&Passage> = q
            .supporting
            .iter()
            .filter_map(|&i| q.passages.get(i))
            .collect();
        let pool: Vec<Passage> = ranking
            .iter()
            .filter_map(|(id, _)| passages.get(id).cloned())
            .collect();
        let same = |a: &Passage, b: &Passage| a.title == b.title && a.text == b.text;
        let supporting: Vec<usize> = (0..pool.len())
            .filter(|&i| gold.iter().any(|g| same(g, &pool[i])))
            .collect();
        let missing: Vec<String> = gold
            .iter()
            .filter(|g| !pool.iter().any(|p| same(g, p)))
            .map(|g| gold_not_retrieved(&g.title))
            .collect();
        if !gold.is_empty() {
            self.with_gold += 1;
            // Over all of the question's gold passages, retrieved or not.
            for (sum, k) in self.recall.iter_mut().zip(RECALL_AT) {
                let found = supporting.iter().filter(|&&i| i < k).count();
                *sum += found as f64 / gold.len() as f64;
            }
        }
        q.passages = pool;
        q.supporting = supporting;
        q.issues.extend(missing);
        q
    }

    /// `(k, mean R@k)` over the questions with gold passages, for the cut-offs ≤ `k`.
    pub fn recall(&self, k: usize) -> Vec<(usize, f64)> {
        RECALL_AT
            .iter()
            .zip(self.recall)
            .filter(|(&at, _)| at <= k)
            .map(|(&at, sum)| (at, sum / self.with_gold.max(1) as f64))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranking(ids: &[&str]) -> Ranking {
        ids.iter()
            .enumerate()
            .map(|(i, id)| (id.to_string(), 1.0 / (i + 1) as f64))
            .collect()
    }

    #[test]
    fn fusion_takes_both_rankings_and_one_alone_is_cut_to_k() {
        let dense = vec![ranking(&["a", "b", "c"])];
        let lexical = vec![ranking(&["b", "d"])];
        let fused = fuse(Some(dense.clone()), Some(lexical), 3);
        let ids: Vec<&str> = fused[0].iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["b", "a", "d"]);
        assert!((fused[0][0].1 - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-12);
        let alone = fuse(Some(dense), None, 2);
        assert_eq!(alone[0], ranking(&["a", "b"]));
    }

    #[test]
    fn unknown_and_repeated_hits_are_left_out_and_gold_carries_over() {
        let p = |title: &str, text: &str| passage(title, text);
        let passages: HashMap<String, Passage> = [
            ("a", p("A", "alpha")),
            ("b", p("B", "beta")),
            ("b2", p("B", "beta")),
        ]
        .into_iter()
        .map(|(id, p)| (id.to_string(), p))
        .collect();
        let mut rankings = vec![ranking(&["b", "x", "b2", "a"])];
        let mut tally = Tally::default();
        tally.keep_usable(&mut rankings, &passages);
        let ids: Vec<&str> = rankings[0].iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["b", "a"]);
        assert_eq!((tally.unknown_hits, tally.duplicate_hits), (1, 1));
        // Gold: B (retrieved, now at 0) and C (not retrieved).
        let q = Question {
            id: "q1".into(),
            dataset: crate::io::questions::Dataset::HotpotQa,
            question: "who?".into(),
            passages: vec![p("C", "gamma"), p("B", "beta")],
            supporting: vec![0, 1],
            hops: None,
            answer: None,
            answer_aliases: Vec::new(),
            question_type: None,
            level: None,
            supporting_facts: None,
            issues: Vec::new(),
        };
        let out = tally.retrieved(q, &rankings[0], &passages);
        assert_eq!(out.passages, vec![p("B", "beta"), p("A", "alpha")]);
        assert_eq!(out.supporting, vec![0]);
        assert_eq!(out.issues, vec![gold_not_retrieved("C")]);
        assert_eq!(tally.recall(5), vec![(2, 0.5), (5, 0.5)]);
    }
}
