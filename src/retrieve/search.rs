//! A retrieval's rankers and the pools they give: the dense ranking (a query encoder
//! and an index, which come in as a [`DenseRank`]: this layer embeds nothing), BM25
//! over the corpus in memory, or both fused by reciprocal rank ([`super::pools`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::pools::{self, Ranking, Tally};
use super::Corpus;
use crate::io::questions::Question;

/// The dense side of a retrieval: the `depth` best corpus ids of each text.
pub trait DenseRank {
    fn rank(&self, texts: &[&str], depth: usize) -> Result<Vec<Ranking>>;
}

/// The rankers of a retrieval: dense, lexical (the corpus in memory) or both.
pub struct Search<D> {
    dense: Option<D>,
    lexical: Option<Corpus>,
    /// The corpus row of each id (distinct: `Corpus::from_parquet` checks).
    doc_of: HashMap<String, usize>,
    corpus: PathBuf,
    k: usize,
    fusion_depth: usize,
}

impl<D: DenseRank> Search<D> {
    /// Pools of `k` passages of the corpus file `corpus` from `dense`, `lexical` (that
    /// file in memory) or both fused, each ranking `fusion_depth` deep (at least `k`).
    pub fn new(
        dense: Option<D>,
        lexical: Option<Corpus>,
        corpus: &Path,
        k: usize,
        fusion_depth: usize,
    ) -> Self {
        let doc_of = lexical
            .iter()
            .flat_map(|c| c.ids.iter().cloned().enumerate().map(|(i, id)| (id, i)))
            .collect();
        Self {
            dense,
            lexical,
            doc_of,
            corpus: corpus.to_path_buf(),
            k,
            fusion_depth,
        }
    }

    /// The dense ranker, when the search has one.
    pub fn dense(&self) -> Option<&D> {
        self.dense.as_ref()
    }

    /// `questions` with their pools (gold carried over, `tally` counting), and the
    /// rankings the pools were taken from (the hits left out already dropped).
    pub fn pools(
        &self,
        questions: Vec<Question>,
        tally: &mut Tally,
    ) -> Result<(Vec<Question>, Vec<Ranking>)> {
        let texts: Vec<&str> = questions.iter().map(|q| q.question.as_str()).collect();
        let depth = self.k.max(self.fusion_depth);
        let dense = self
            .dense
            .as_ref()
            .map(|d| d.rank(&texts, depth))
            .transpose()?;
        let lexical = self
            .lexical
            .as_ref()
            .map(|corpus| pools::lexical(corpus, &texts, depth))
            .transpose()?;
        let mut rankings = pools::fuse(dense, lexical, self.k);
        let loaded = self.lexical.as_ref().map(|corpus| (corpus, &self.doc_of));
        let passages = pools::passages(loaded, &self.corpus, &rankings)?;
        tally.keep_usable(&mut rankings, &passages);
        let out = questions
            .into_iter()
            .zip(&rankings)
            .map(|(q, r)| tally.retrieved(q, r, &passages))
            .collect();
        Ok((out, rankings))
    }

    /// Warns of the hits `tally` left out.
    pub fn warn_left_out(&self, tally: &Tally) {
        if tally.duplicate_hits > 0 {
            log::warn!(
                "{} hits repeated the title and text of a higher-ranked passage under another \
                 id (--corpus {} holds duplicate passages): each was collapsed into the first, \
                 so some pools are shorter than --k {}; drop the repeated rows from the corpus \
                 to keep every pool full",
                tally.duplicate_hits,
                self.corpus.display(),
                self.k
            );
        }
        if tally.unknown_hits > 0 {
            log::warn!(
                "{} hits named index ids that --corpus {} lacks (or holds without usable \
                 text): they were left out, so some pools are shorter than --k {}",
                tally.unknown_hits,
                self.corpus.display(),
                self.k
            );
        }
    }
}
