//! TF-IDF cosine similarity with scikit-learn's `TfidfVectorizer` defaults: raw term
//! counts, smooth idf `ln((1 + N)/(1 + df)) + 1`, L2-normalised rows. The vocabulary
//! and idf come from the documents given at construction; query terms outside it are
//! ignored, as `transform` does.

use std::collections::HashMap;

use super::{terms, top_k, Hit};

/// A fitted TF-IDF model with the normalised vector of each document.
#[derive(Debug, Clone)]
pub struct TfIdf {
    vocab: HashMap<String, usize>,
    idf: Vec<f64>,
    docs: Vec<Vec<(usize, f64)>>,
}

impl TfIdf {
    /// Fits on `docs` and stores their vectors.
    pub fn new<S: AsRef<str>>(docs: &[S]) -> Self {
        let mut vocab: HashMap<String, usize> = HashMap::new();
        let mut df: Vec<u32> = Vec::new();
        let counted: Vec<HashMap<usize, u32>> = docs
            .iter()
            .map(|doc| {
                let mut c: HashMap<usize, u32> = HashMap::new();
                for w in terms(doc.as_ref()) {
                    let next = vocab.len();
                    let t = *vocab.entry(w).or_insert(next);
                    if t == df.len() {
                        df.push(0);
                    }
                    *c.entry(t).or_default() += 1;
                }
                for &t in c.keys() {
                    df[t] += 1;
                }
                c
            })
            .collect();
        let n = docs.len() as f64;
        let idf: Vec<f64> = df
            .iter()
            .map(|&d| ((1.0 + n) / (1.0 + f64::from(d))).ln() + 1.0)
            .collect();
        let docs = counted
            .into_iter()
            .map(|c| normalise(c.into_iter().map(|(t, tf)| (t, f64::from(tf) * idf[t]))))
            .collect();
        Self { vocab, idf, docs }
    }

    /// The normalised vector of `text` in this model's vocabulary.
    fn vector(&self, text: &str) -> Vec<(usize, f64)> {
        let mut c: HashMap<usize, u32> = HashMap::new();
        for w in terms(text) {
            if let Some(&t) = self.vocab.get(&w) {
                *c.entry(t).or_default() += 1;
            }
        }
        normalise(
            c.into_iter()
                .map(|(t, tf)| (t, f64::from(tf) * self.idf[t])),
        )
    }

    /// Cosine similarity of `query` to each document, in document order.
    pub fn cosine(&self, query: &str) -> Vec<f64> {
        let q: HashMap<usize, f64> = self.vector(query).into_iter().collect();
        self.docs
            .iter()
            .map(|d| {
                d.iter()
                    .map(|(t, w)| w * q.get(t).copied().unwrap_or(0.0))
                    .sum()
            })
            .collect()
    }

    /// `candidates` (document indices) ranked by cosine to `query`, best first (ties:
    /// lower index first), at most `k`.
    pub fn rank(&self, query: &str, candidates: &[usize], k: usize) -> Vec<Hit> {
        let cos = self.cosine(query);
        top_k(candidates.iter().map(|&d| (d, cos[d])), k)
    }
}

/// L2-normalised sparse vector, sorted by term index (so sums run in a fixed order).
fn normalise(v: impl Iterator<Item = (usize, f64)>) -> Vec<(usize, f64)> {
    let mut v: Vec<(usize, f64)> = v.collect();
    v.sort_by_key(|&(t, _)| t);
    let norm = v.iter().map(|(_, w)| w * w).sum::<f64>().sqrt();
    if norm > 0.0 {
        for (_, w) in &mut v {
            *w /= norm;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_matches_sklearn() {
        // from sklearn.feature_extraction.text import TfidfVectorizer
        // v = TfidfVectorizer().fit(docs); (v.transform(docs) @ v.transform([q]).T)
        let docs = [
            "Paris is the capital of France",
            "The Eiffel Tower is in Paris",
            "Berlin is the capital of Germany",
        ];
        let m = TfIdf::new(&docs);
        let q = "Which tower is in Paris?";
        // Hand computation of sklearn's result: idf(t) = ln(4/(1+df)) + 1.
        let idf = |df: f64| (4.0 / (1.0 + df)).ln() + 1.0;
        let d1 = [idf(3.0), idf(1.0), idf(1.0), idf(3.0), idf(1.0), idf(2.0)]; // the eiffel tower is in paris
        let qv = [idf(1.0), idf(3.0), idf(1.0), idf(2.0)]; // tower is in paris
        let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let dot =
            idf(1.0) * idf(1.0) + idf(3.0) * idf(3.0) + idf(1.0) * idf(1.0) + idf(2.0) * idf(2.0);
        let expect = dot / (n(&d1) * n(&qv));
        let cos = m.cosine(q);
        assert!((cos[1] - expect).abs() < 1e-12, "{} vs {expect}", cos[1]);
        let ranked = m.rank(q, &[0, 1, 2], 2);
        assert_eq!(ranked.iter().map(|h| h.doc).collect::<Vec<_>>(), [1, 0]);
    }
}
