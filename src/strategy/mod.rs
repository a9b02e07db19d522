//! Search strategies as pure state machines: they emit model inputs and consume
//! scores, and never call a backend (docs/architecture.md, "The seams").

pub mod beam;
pub mod efficientrag;
pub mod lepus;

use crate::model::batch::Sequence;

/// A per-question search the pipeline can drive.
pub trait Strategy: Send {
    /// What a finished search yields.
    type Output: Send;
    /// Model inputs of the next step, each with the index of the head that scores it.
    /// Empty once the search has finished.
    fn requests(&self) -> Vec<(Sequence, usize)>;
    /// Logits of the requests of the current step, in order.
    fn feed(&mut self, logits: Vec<Vec<f32>>);
    /// The output, once finished (taken at most once).
    fn take_output(&mut self) -> Option<Self::Output>;
}

/// The quarantine reason of a search whose scores hold a NaN or an infinity (a model
/// that overflowed: its ranking would be arbitrary), or `None` when all are finite.
pub fn non_finite<'a>(scores: impl IntoIterator<Item = &'a f32>) -> Option<String> {
    let bad = scores.into_iter().find(|s| !s.is_finite())?;
    Some(format!(
        "the model produced a non-finite score ({bad}): its ranking would be arbitrary \
         (try --dtype f32, or check the checkpoint)"
    ))
}
