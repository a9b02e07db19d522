//! Set-overlap scores: the official HotpotQA supporting-fact metric (`update_sp`), the
//! joint metric, and the same counting applied to sets of passage indices.

use std::collections::HashSet;
use std::hash::Hash;

use super::answer::AnswerScore;

/// EM, precision, recall and F1 of a predicted set against a gold set.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct SetScore {
    pub em: f64,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// Scores the distinct elements of `prediction` against those of `gold`, order-free,
/// exactly as `update_sp` counts: precision (recall) is 0 when the prediction (gold) is
/// empty, and EM is 1 only when there is no false positive and no false negative (so two
/// empty sets give EM 1, F1 0).
pub fn set_scores<T: Eq + Hash>(
    prediction: impl IntoIterator<Item = T>,
    gold: impl IntoIterator<Item = T>,
) -> SetScore {
    let pred: HashSet<T> = prediction.into_iter().collect();
    let gold: HashSet<T> = gold.into_iter().collect();
    let tp = pred.intersection(&gold).count() as f64;
    let fp = pred.len() as f64 - tp;
    let fn_ = gold.len() as f64 - tp;
    let ratio = |num: f64, den: f64| if den > 0.0 { num / den } else { 0.0 };
    let precision = ratio(tp, tp + fp);
    let recall = ratio(tp, tp + fn_);
    SetScore {
        em: f64::from(u8::from(fp + fn_ == 0.0)),
        precision,
        recall,
        f1: ratio(2.0 * precision * recall, precision + recall),
    }
}

/// The official supporting-fact score over `(title, sentence index)` pairs.
pub fn supporting_fact_scores<'a>(
    prediction: impl IntoIterator<Item = (&'a str, i32)>,
    gold: impl IntoIterator<Item = (&'a str, i32)>,
) -> SetScore {
    set_scores(prediction, gold)
}

/// The official joint score: precision and recall are the products of the answer and
/// SP ones, EM the product of the two EMs.
pub fn joint(answer: &AnswerScore, sp: &SetScore) -> SetScore {
    let precision = answer.precision * sp.precision;
    let recall = answer.recall * sp.recall;
    SetScore {
        em: answer.em * sp.em,
        precision,
        recall,
        f1: if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::answer_f1;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn supporting_facts_hand_computed() {
        // tp = 1 (A,0); fp = 2; fn = 1 (B,0): P = 1/3, R = 1/2, F1 = 0.4.
        let s = supporting_fact_scores([("A", 0), ("B", 1), ("C", 0)], [("A", 0), ("B", 0)]);
        assert!(
            close(s.precision, 1.0 / 3.0) && close(s.recall, 0.5) && close(s.f1, 0.4),
            "{s:?}"
        );
        assert_eq!(s.em, 0.0);
        // Duplicates in the prediction count once (the official code builds sets).
        let s = supporting_fact_scores([("A", 0), ("A", 0), ("B", 0)], [("B", 0), ("A", 0)]);
        assert_eq!((s.em, s.f1), (1.0, 1.0));
        // Empty against empty: EM 1, F1 0, as update_sp.
        let s = supporting_fact_scores([], []);
        assert_eq!((s.em, s.precision, s.recall, s.f1), (1.0, 0.0, 0.0, 0.0));
    }

    #[test]
    fn joint_hand_computed() {
        // Answer P = 1, R = 2/3; SP P = 1/3, R = 1/2 → joint P = R = 1/3, F1 = 1/3.
        let a = answer_f1("the cat sat", "cat sat down");
        let sp = supporting_fact_scores([("A", 0), ("B", 1), ("C", 0)], [("A", 0), ("B", 0)]);
        let j = joint(&a, &sp);
        assert!(
            close(j.precision, 1.0 / 3.0) && close(j.recall, 1.0 / 3.0) && close(j.f1, 1.0 / 3.0)
        );
        assert_eq!(j.em, 0.0);
        let exact = answer_f1("x", "x");
        let j = joint(&exact, &set_scores([1], [1]));
        assert_eq!((j.em, j.f1), (1.0, 1.0));
    }
}
