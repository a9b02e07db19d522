//! Search strategies as pure state machines: they emit model inputs and consume
//! scores, and never call a backend (docs/architecture.md, "The seams"). The jobs
//! drive them through the scheduler's contract, [`crate::pipeline::Strategy`].

pub mod beam;
pub mod efficientrag;
pub mod lepus;

/// The quarantine reason of a search whose scores hold a NaN or an infinity (a model
/// that overflowed: its ranking would be arbitrary), or `None` when all are finite.
pub fn non_finite<'a>(scores: impl IntoIterator<Item = &'a f32>) -> Option<String> {
    let bad = scores.into_iter().find(|s| !s.is_finite())?;
    Some(format!(
        "the model produced a non-finite score ({bad}): its ranking would be arbitrary \
         (try --dtype f32, or check the checkpoint)"
    ))
}
