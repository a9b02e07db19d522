//! TF-IDF cosine similarity with scikit-learn's `TfidfVectorizer` defaults: raw term
//! counts, smooth idf `ln((1 + N)/(1 + df)) + 1`, L2-normalised rows. The vocabulary
//! and idf come from the documents given at construction; query terms outside it are
//! ignored, as `transform` does. [`TfIdfOptions`] adds the vectorizer's
//! `strip_accents="unicode"` and `stop_words="english"` (what LEPUS's pruner uses).

use std::collections::HashMap;

use super::{terms, top_k, Hit};

/// Options of the analyzer beyond scikit-learn's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TfIdfOptions {
    /// `strip_accents="unicode"`: NFKD, then combining marks removed.
    pub strip_accents: bool,
    /// `stop_words="english"`: drop [`SKLEARN_ENGLISH_STOP_WORDS`].
    pub english_stop_words: bool,
}

impl TfIdfOptions {
    /// The analyzer of LEPUS's TF-IDF pruner (`TfidfVectorizer(strip_accents="unicode",
    /// stop_words="english")`).
    pub const LEPUS: Self = Self {
        strip_accents: true,
        english_stop_words: true,
    };

    fn terms(self, text: &str) -> Vec<String> {
        let mut t = if self.strip_accents {
            use tokenizers::normalizers::{StripAccents, NFKD};
            use tokenizers::Normalizer;
            let mut n = tokenizers::NormalizedString::from(text);
            // Neither normalizer can fail on a plain string.
            let _ = NFKD
                .normalize(&mut n)
                .and_then(|()| StripAccents.normalize(&mut n));
            terms(n.get())
        } else {
            terms(text)
        };
        if self.english_stop_words {
            t.retain(|w| {
                SKLEARN_ENGLISH_STOP_WORDS
                    .binary_search(&w.as_str())
                    .is_err()
            });
        }
        t
    }
}

/// A fitted TF-IDF model with the normalised vector of each document.
#[derive(Debug, Clone)]
pub struct TfIdf {
    options: TfIdfOptions,
    vocab: HashMap<String, usize>,
    idf: Vec<f64>,
    docs: Vec<Vec<(usize, f64)>>,
}

impl TfIdf {
    /// Fits on `docs` (default analyzer) and stores their vectors.
    pub fn new<S: AsRef<str>>(docs: &[S]) -> Self {
        Self::with_options(docs, TfIdfOptions::default())
    }

    /// Fits on `docs` with the given analyzer options.
    pub fn with_options<S: AsRef<str>>(docs: &[S], options: TfIdfOptions) -> Self {
        let mut vocab: HashMap<String, usize> = HashMap::new();
        let mut df: Vec<u32> = Vec::new();
        let counted: Vec<HashMap<usize, u32>> = docs
            .iter()
            .map(|doc| {
                let mut c: HashMap<usize, u32> = HashMap::new();
                for w in options.terms(doc.as_ref()) {
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
        Self {
            options,
            vocab,
            idf,
            docs,
        }
    }

    /// Whether the fitted vocabulary is empty (scikit-learn's `fit` raises then).
    pub fn is_empty(&self) -> bool {
        self.vocab.is_empty()
    }

    /// The normalised vector of `text` in this model's vocabulary.
    fn vector(&self, text: &str) -> Vec<(usize, f64)> {
        let mut c: HashMap<usize, u32> = HashMap::new();
        for w in self.options.terms(text) {
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

/// scikit-learn's English stop words (`sklearn.feature_extraction.text.ENGLISH_STOP_WORDS`,
/// the Glasgow Information Retrieval Group list), sorted for binary search.
pub const SKLEARN_ENGLISH_STOP_WORDS: [&str; 318] = [
    "a",
    "about",
    "above",
    "across",
    "after",
    "afterwards",
    "again",
    "against",
    "all",
    "almost",
    "alone",
    "along",
    "already",
    "also",
    "although",
    "always",
    "am",
    "among",
    "amongst",
    "amoungst",
    "amount",
    "an",
    "and",
    "another",
    "any",
    "anyhow",
    "anyone",
    "anything",
    "anyway",
    "anywhere",
    "are",
    "around",
    "as",
    "at",
    "back",
    "be",
    "became",
    "because",
    "become",
    "becomes",
    "becoming",
    "been",
    "before",
    "beforehand",
    "behind",
    "being",
    "below",
    "beside",
    "besides",
    "between",
    "beyond",
    "bill",
    "both",
    "bottom",
    "but",
    "by",
    "call",
    "can",
    "cannot",
    "cant",
    "co",
    "con",
    "could",
    "couldnt",
    "cry",
    "de",
    "describe",
    "detail",
    "do",
    "done",
    "down",
    "due",
    "during",
    "each",
    "eg",
    "eight",
    "either",
    "eleven",
    "else",
    "elsewhere",
    "empty",
    "enough",
    "etc",
    "even",
    "ever",
    "every",
    "everyone",
    "everything",
    "everywhere",
    "except",
    "few",
    "fifteen",
    "fifty",
    "fill",
    "find",
    "fire",
    "first",
    "five",
    "for",
    "former",
    "formerly",
    "forty",
    "found",
    "four",
    "from",
    "front",
    "full",
    "further",
    "get",
    "give",
    "go",
    "had",
    "has",
    "hasnt",
    "have",
    "he",
    "hence",
    "her",
    "here",
    "hereafter",
    "hereby",
    "herein",
    "hereupon",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "however",
    "hundred",
    "i",
    "ie",
    "if",
    "in",
    "inc",
    "indeed",
    "interest",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "keep",
    "last",
    "latter",
    "latterly",
    "least",
    "less",
    "ltd",
    "made",
    "many",
    "may",
    "me",
    "meanwhile",
    "might",
    "mill",
    "mine",
    "more",
    "moreover",
    "most",
    "mostly",
    "move",
    "much",
    "must",
    "my",
    "myself",
    "name",
    "namely",
    "neither",
    "never",
    "nevertheless",
    "next",
    "nine",
    "no",
    "nobody",
    "none",
    "noone",
    "nor",
    "not",
    "nothing",
    "now",
    "nowhere",
    "of",
    "off",
    "often",
    "on",
    "once",
    "one",
    "only",
    "onto",
    "or",
    "other",
    "others",
    "otherwise",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "part",
    "per",
    "perhaps",
    "please",
    "put",
    "rather",
    "re",
    "same",
    "see",
    "seem",
    "seemed",
    "seeming",
    "seems",
    "serious",
    "several",
    "she",
    "should",
    "show",
    "side",
    "since",
    "sincere",
    "six",
    "sixty",
    "so",
    "some",
    "somehow",
    "someone",
    "something",
    "sometime",
    "sometimes",
    "somewhere",
    "still",
    "such",
    "system",
    "take",
    "ten",
    "than",
    "that",
    "the",
    "their",
    "them",
    "themselves",
    "then",
    "thence",
    "there",
    "thereafter",
    "thereby",
    "therefore",
    "therein",
    "thereupon",
    "these",
    "they",
    "thick",
    "thin",
    "third",
    "this",
    "those",
    "though",
    "three",
    "through",
    "throughout",
    "thru",
    "thus",
    "to",
    "together",
    "too",
    "top",
    "toward",
    "towards",
    "twelve",
    "twenty",
    "two",
    "un",
    "under",
    "until",
    "up",
    "upon",
    "us",
    "very",
    "via",
    "was",
    "we",
    "well",
    "were",
    "what",
    "whatever",
    "when",
    "whence",
    "whenever",
    "where",
    "whereafter",
    "whereas",
    "whereby",
    "wherein",
    "whereupon",
    "wherever",
    "whether",
    "which",
    "while",
    "whither",
    "who",
    "whoever",
    "whole",
    "whom",
    "whose",
    "why",
    "will",
    "with",
    "within",
    "without",
    "would",
    "yet",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

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

/// LEPUS's second hops: per passage, the other non-blank passages ranked by TF-IDF cosine to the question
/// (fitted on those candidates), the best `k` (none when their vocabulary is empty).
pub fn expansions(question: &str, texts: &[&str], k: usize) -> Vec<Vec<usize>> {
    (0..texts.len())
        .map(|d| {
            let cands: Vec<usize> = (0..texts.len())
                .filter(|&j| j != d && !texts[j].trim().is_empty())
                .collect();
            let docs: Vec<&str> = cands.iter().map(|&j| texts[j]).collect();
            let model = TfIdf::with_options(&docs, TfIdfOptions::LEPUS);
            if model.is_empty() {
                return Vec::new();
            }
            let all: Vec<usize> = (0..docs.len()).collect();
            model
                .rank(question, &all, k)
                .into_iter()
                .map(|h| cands[h.doc])
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansions_rank_the_other_passages_by_tfidf() {
        let texts = [
            "The river flows north.",
            "Apricots grow on the terraces.",
            "",
            "The terraces face the river.",
        ];
        let e = expansions("Which terraces grow apricots?", &texts, 2);
        assert_eq!(e[0], vec![1, 3]);
        assert_eq!(e[1], vec![3, 0]);
        assert_eq!(e[3], vec![1, 0]);
        assert_eq!(
            e[2].len(),
            2,
            "a blank passage is no candidate but can be expanded"
        );
    }

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

    #[test]
    fn lepus_options_strip_accents_and_english_stop_words() {
        // sklearn: TfidfVectorizer(strip_accents="unicode", stop_words="english")
        //   .build_analyzer()("Émile went to the Café across the street")
        //   == ['emile', 'went', 'cafe', 'street']
        assert_eq!(
            TfIdfOptions::LEPUS.terms("Émile went to the Café across the street"),
            ["emile", "went", "cafe", "street"]
        );
        assert!(SKLEARN_ENGLISH_STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        let m = TfIdf::with_options(&["the of and", "cafe"], TfIdfOptions::LEPUS);
        assert_eq!(m.cosine("Café?"), [0.0, 1.0]);
        assert!(TfIdf::with_options(&["the"], TfIdfOptions::LEPUS).is_empty());
    }
}
