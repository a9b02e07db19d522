//! Evaluation metrics: the HotpotQA official answer and supporting-fact scores
//! (`hotpot_evaluate_v1.py`), retrieval EM/F1 over passage sets (Beam Retrieval), and
//! Recall@k / answer recall AR@k over ranked passages (PathRetriever, LEPUS).
//!
//! Every function scores one question; [`eval`] averages them over a prediction file.

pub mod answer;
pub mod eval;
pub mod plot;
pub mod retrieval;
pub mod sets;

pub use answer::{
    answer_em, answer_f1, best_answer_scores, is_closed_answer, normalize_answer, AnswerScore,
};
pub use retrieval::{answer_in_passage, answer_recall_at_k, recall_at_k, retrieval_scores};
pub use sets::{joint, set_scores, supporting_fact_scores, SetScore};
