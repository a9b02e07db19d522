//! Retrieval scores of a ranked passage chain against the gold supporting passages.
//!
//! - Retrieval EM/F1 (Beam Retrieval, seed 003 §4.3): the first `hops` passages of the
//!   chain as a set against the gold set, order-free.
//! - Recall@k (R@k in PathRetriever and LEPUS): 1 when every gold passage is among the
//!   first k distinct passages of the ranking.
//! - AR@k, answer recall (LEPUS, seed 001): 1 when the answer (or an alias) occurs in one
//!   of the first k passages. The answer and the passage (title, a space, text) are both
//!   normalised as for answer EM and matched as whole tokens, so "1" does not occur in
//!   "1990". Which questions count is the caller's choice (see `hopscore eval`).

use super::answer::normalize_answer;
use super::sets::{set_scores, SetScore};

/// The first `k` distinct passage indices of `chain`, in chain order.
fn top_k(chain: &[usize], k: usize) -> Vec<usize> {
    let mut seen = Vec::with_capacity(k);
    for &p in chain {
        if seen.len() == k {
            break;
        }
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
    seen
}

/// Retrieval EM/F1 of the first `hops` distinct passages of `chain`.
pub fn retrieval_scores(chain: &[usize], gold: &[usize], hops: usize) -> SetScore {
    set_scores(top_k(chain, hops), gold.iter().copied())
}

/// 1.0 when every gold passage is in the first `k` distinct passages of `chain`
/// (0.0 for an empty gold set: there is nothing to find).
pub fn recall_at_k(chain: &[usize], gold: &[usize], k: usize) -> f64 {
    let top = top_k(chain, k);
    f64::from(u8::from(
        !gold.is_empty() && gold.iter().all(|g| top.contains(g)),
    ))
}

/// Whether one of `answers` occurs, as whole normalised tokens, in the passage.
pub fn answer_in_passage<'a>(
    title: &str,
    text: &str,
    answers: impl IntoIterator<Item = &'a str>,
) -> bool {
    let passage = format!(" {} ", normalize_answer(&format!("{title} {text}")));
    answers.into_iter().any(|a| {
        let a = normalize_answer(a);
        !a.is_empty() && passage.contains(&format!(" {a} "))
    })
}

/// 1.0 when one of the first `k` distinct passages of `chain` contains the answer;
/// `contains_answer[i]` says whether passage `i` does (see [`answer_in_passage`]).
pub fn answer_recall_at_k(chain: &[usize], contains_answer: &[bool], k: usize) -> f64 {
    let hit = top_k(chain, k)
        .into_iter()
        .any(|p| contains_answer.get(p).copied().unwrap_or(false));
    f64::from(u8::from(hit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrieval_em_f1_is_order_free_over_the_first_hops() {
        let s = retrieval_scores(&[3, 1, 7], &[1, 3], 2);
        assert_eq!((s.em, s.f1), (1.0, 1.0));
        // {1, 2} vs {1, 3}: P = R = F1 = 1/2.
        let s = retrieval_scores(&[1, 2, 3], &[1, 3], 2);
        assert_eq!((s.em, s.precision, s.recall, s.f1), (0.0, 0.5, 0.5, 0.5));
        // A repeated passage does not fill a hop: first two distinct are {4, 1}.
        let s = retrieval_scores(&[4, 4, 1], &[1, 4], 2);
        assert_eq!(s.em, 1.0);
        // Three hops, two of three found: P = R = 2/3.
        let s = retrieval_scores(&[0, 5, 2], &[0, 2, 9], 3);
        assert!((s.f1 - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(retrieval_scores(&[], &[0, 1], 2).f1, 0.0);
    }

    #[test]
    fn recall_at_k_needs_every_gold_passage() {
        let chain = [5, 0, 9, 2, 1];
        assert_eq!(recall_at_k(&chain, &[0, 5], 2), 1.0);
        assert_eq!(recall_at_k(&chain, &[0, 2], 2), 0.0);
        assert_eq!(recall_at_k(&chain, &[0, 2], 4), 1.0);
        assert_eq!(recall_at_k(&[5, 5, 0], &[0, 5], 2), 1.0);
        assert_eq!(recall_at_k(&chain, &[], 10), 0.0);
    }

    #[test]
    fn answer_recall_matches_whole_normalised_tokens() {
        assert!(answer_in_passage(
            "Paris",
            "It is the capital of France.",
            ["paris"]
        ));
        assert!(answer_in_passage("X", "Born in 1990, she …", ["1990"]));
        assert!(!answer_in_passage("X", "Born in 1990.", ["1"]));
        assert!(answer_in_passage(
            "X",
            "The U.S. Army",
            ["the us army", "nope"]
        ));
        assert!(!answer_in_passage("X", "anything", ["the"]));
        let contains = [false, true, false];
        assert_eq!(answer_recall_at_k(&[0, 2, 1], &contains, 2), 0.0);
        assert_eq!(answer_recall_at_k(&[0, 2, 1], &contains, 3), 1.0);
    }
}
