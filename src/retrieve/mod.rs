//! Lexical retrieval over a question's own passages or a corpus: BM25 for first-stage
//! search (EfficientRAG's loop, the LLM post-stage, the BM25 baseline) and TF-IDF
//! cosine for ranking a document's expansion candidates (LEPUS, docs/spec.md §3); the
//! dense index of `embed` outputs ([`dense`]) and the candidate pools `retrieve` builds
//! from the rankings ([`pools`]).
//!
//! Both share one analyzer, [`terms`]: lowercase, maximal runs of Unicode
//! alphanumerics or `_` of at least two characters (scikit-learn's default
//! `token_pattern` `(?u)\b\w\w+\b`). BM25 also drops a small English stop-word list.

pub mod bm25;
pub mod chunks;
pub mod corpus;
pub mod dense;
pub mod pools;
pub mod search;
pub mod tfidf;

pub use bm25::Bm25Index;
pub use corpus::Corpus;
pub use tfidf::TfIdf;

/// The analyzer: lowercased word tokens of at least two characters, in text order.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = 0usize;
    let mut flush = |cur: &mut String, chars: &mut usize| {
        if *chars >= 2 {
            out.push(std::mem::take(cur));
        } else {
            cur.clear();
        }
        *chars = 0;
    };
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            cur.extend(c.to_lowercase());
            chars += 1;
        } else {
            flush(&mut cur, &mut chars);
        }
    }
    flush(&mut cur, &mut chars);
    out
}

/// Lucene's English stop words (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`), which BM25
/// ignores in documents and queries.
pub const STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// [`terms`] without [`STOP_WORDS`].
pub fn content_terms(text: &str) -> Vec<String> {
    let mut t = terms(text);
    t.retain(|w| !STOP_WORDS.contains(&w.as_str()));
    t
}

/// One search hit: the document's index and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub doc: usize,
    pub score: f64,
}

/// The `k` best of `scores` (document index, score), best first; ties go to the lower
/// index so results never depend on hash order.
pub(crate) fn top_k(scores: impl IntoIterator<Item = (usize, f64)>, k: usize) -> Vec<Hit> {
    let mut hits: Vec<Hit> = scores
        .into_iter()
        .map(|(doc, score)| Hit { doc, score })
        .collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc)));
    hits.truncate(k);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn analyzer_matches_sklearn_token_pattern() {
        // sklearn: TfidfVectorizer().build_analyzer()("Émile's U.S. tour, 1997 — a_b x")
        assert_eq!(
            terms("Émile's U.S. tour, 1997 — a_b x"),
            ["émile", "tour", "1997", "a_b"]
        );
        assert_eq!(
            content_terms("The Eiffel tower is in Paris"),
            ["eiffel", "tower", "paris"]
        );
    }
}
