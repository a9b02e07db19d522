//! Answer scores as in HotpotQA's official `hotpot_evaluate_v1.py`: normalisation,
//! exact match and token F1.
//!
//! Normalisation applies, in this order: lowercase; drop ASCII punctuation (Python's
//! `string.punctuation`); replace the words `a`, `an`, `the` by a space (a "word" is a
//! maximal run of alphanumeric characters or `_`, as Python's `\b` sees it); collapse
//! whitespace. Python's `\w` and `str.isalnum` differ from Rust's `char::is_alphanumeric`
//! on a few marks and letter-like numerals; no dataset answer we know of is affected.

use std::collections::HashMap;

/// Answers that only match themselves: F1 is 0 when either side is one of these and the
/// two sides differ, even if they share tokens.
const CLOSED_ANSWERS: [&str; 3] = ["yes", "no", "noanswer"];

/// Precision, recall and F1 of one prediction against one gold answer.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct AnswerScore {
    pub em: f64,
    pub f1: f64,
    pub precision: f64,
    pub recall: f64,
}

/// Whether a normalised answer is `yes`, `no` or `noanswer`: such answers score F1 only
/// against themselves, and answer recall does not apply to them.
pub fn is_closed_answer(normalized: &str) -> bool {
    CLOSED_ANSWERS.contains(&normalized)
}

/// The official `normalize_answer`.
pub fn normalize_answer(s: &str) -> String {
    let lowered = s.to_lowercase();
    let no_punct: String = lowered
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(no_punct.len());
    let mut rest = no_punct.as_str();
    while let Some(c) = rest.chars().next() {
        let end = if is_word(c) {
            rest.find(|c: char| !is_word(c)).unwrap_or(rest.len())
        } else {
            c.len_utf8()
        };
        let piece = &rest[..end];
        out.push_str(if matches!(piece, "a" | "an" | "the") {
            " "
        } else {
            piece
        });
        rest = &rest[end..];
    }
    // Python's str.split() also splits on the ASCII separators \x1c-\x1f.
    out.split(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// 1.0 when the normalised strings are equal, else 0.0.
pub fn answer_em(prediction: &str, gold: &str) -> f64 {
    f64::from(u8::from(
        normalize_answer(prediction) == normalize_answer(gold),
    ))
}

/// Official token F1 (with precision and recall) and EM of one prediction.
pub fn answer_f1(prediction: &str, gold: &str) -> AnswerScore {
    let (p, g) = (normalize_answer(prediction), normalize_answer(gold));
    let em = f64::from(u8::from(p == g));
    let zero = AnswerScore {
        em,
        ..AnswerScore::default()
    };
    if p != g && (is_closed_answer(&p) || is_closed_answer(&g)) {
        return zero;
    }
    let mut gold_counts: HashMap<&str, usize> = HashMap::new();
    for t in g.split(' ').filter(|t| !t.is_empty()) {
        *gold_counts.entry(t).or_default() += 1;
    }
    let pred_tokens: Vec<&str> = p.split(' ').filter(|t| !t.is_empty()).collect();
    let gold_len: usize = gold_counts.values().sum();
    let mut same = 0usize;
    for t in &pred_tokens {
        if let Some(n) = gold_counts.get_mut(t).filter(|n| **n > 0) {
            *n -= 1;
            same += 1;
        }
    }
    if same == 0 {
        return zero;
    }
    let precision = same as f64 / pred_tokens.len() as f64;
    let recall = same as f64 / gold_len as f64;
    AnswerScore {
        em,
        f1: 2.0 * precision * recall / (precision + recall),
        precision,
        recall,
    }
}

/// Best EM and best F1 over several accepted gold answers, each maximised separately as
/// MuSiQue's official metric does (precision and recall come from the best-F1 gold).
/// With a single gold answer this is exactly the HotpotQA score; `None` without golds.
pub fn best_answer_scores<'a>(
    prediction: &str,
    golds: impl IntoIterator<Item = &'a str>,
) -> Option<AnswerScore> {
    golds
        .into_iter()
        .map(|g| answer_f1(prediction, g))
        .reduce(|a, b| {
            let best = if b.f1 > a.f1 { b } else { a };
            AnswerScore {
                em: a.em.max(b.em),
                ..best
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn normalisation_follows_the_official_order() {
        assert_eq!(normalize_answer("The Cat, a dog!"), "cat dog");
        assert_eq!(normalize_answer("  An  apple's  "), "apples");
        // Articles only as whole words; punctuation goes first, so "the-end" is one word.
        assert_eq!(normalize_answer("Theatre the-end"), "theatre theend");
        assert_eq!(normalize_answer("Über THE Straße"), "über straße");
        assert_eq!(normalize_answer("a\u{1f}b"), "b");
        assert_eq!(normalize_answer("..."), "");
    }

    #[test]
    fn exact_match_and_f1_hand_computed() {
        assert_eq!(answer_em("The Beatles", "beatles"), 1.0);
        assert_eq!(answer_em("Beatles band", "beatles"), 0.0);
        // pred {cat, sat}, gold {cat, sat, down}: P = 1, R = 2/3, F1 = 0.8.
        let s = answer_f1("the cat sat", "cat sat down");
        assert!(
            close(s.precision, 1.0) && close(s.recall, 2.0 / 3.0) && close(s.f1, 0.8),
            "{s:?}"
        );
        assert_eq!(s.em, 0.0);
        // Repeated tokens count with multiplicity: x x y vs x y y share 2 of 3.
        assert!(close(answer_f1("x x y", "x y y").f1, 2.0 / 3.0));
        assert_eq!(answer_f1("red", "blue").f1, 0.0);
    }

    #[test]
    fn yes_no_noanswer_only_match_themselves() {
        assert_eq!(answer_f1("yes", "yes sir").f1, 0.0);
        assert_eq!(answer_f1("no way", "no").f1, 0.0);
        assert_eq!(answer_f1("yes", "no").f1, 0.0);
        assert_eq!(answer_f1("Yes.", "yes").f1, 1.0);
        assert_eq!(answer_f1("noanswer", "noanswer").em, 1.0);
        // "no answer" normalises to two tokens, not to "noanswer".
        assert!(close(answer_f1("no answer", "answer").f1, 2.0 / 3.0));
    }

    #[test]
    fn best_over_aliases() {
        let s = best_answer_scores("NYC", ["New York City", "nyc"]).unwrap();
        assert_eq!((s.em, s.f1), (1.0, 1.0));
        let s = best_answer_scores("york", ["New York City", "York, England"]).unwrap();
        assert!(close(s.f1, 2.0 / 3.0), "{s:?}");
        assert!(best_answer_scores("x", []).is_none());
    }
}
