//! Model inputs: tokenised sequences packed back to back without padding, and the
//! grouping of sequences into token-budget batches.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{BatchInputs, BatchShape, Input, Prepared, SeqLayout};

/// One tokenised sequence (special tokens included).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sequence {
    pub ids: Vec<u32>,
    /// Segment ids; empty means all 0.
    pub type_ids: Vec<u32>,
    /// Attention mask (1/0); empty means all 1. Beam Retrieval sets the final [SEP] to 0.
    pub mask: Vec<u8>,
}

/// Sequences packed for one forward pass (varlen layout).
#[derive(Debug, Clone, PartialEq)]
pub struct PackedBatch {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    /// Absolute positions, restarting at 0 in each sequence.
    pub positions: Vec<u32>,
    pub layout: SeqLayout,
}

impl PackedBatch {
    pub fn pack<'a>(seqs: impl IntoIterator<Item = &'a Sequence>) -> Self {
        let mut b = PackedBatch {
            ids: Vec::new(),
            type_ids: Vec::new(),
            positions: Vec::new(),
            layout: SeqLayout {
                cu_seqlens: vec![0],
                mask: Vec::new(),
            },
        };
        for s in seqs {
            let n = s.ids.len();
            b.ids.extend_from_slice(&s.ids);
            if s.type_ids.is_empty() {
                b.type_ids.extend(std::iter::repeat_n(0, n));
            } else {
                b.type_ids.extend_from_slice(&s.type_ids[..n]);
            }
            if s.mask.is_empty() {
                b.layout.mask.extend(std::iter::repeat_n(1.0, n));
            } else {
                b.layout
                    .mask
                    .extend(s.mask[..n].iter().map(|&m| f32::from(m.min(1))));
            }
            b.positions.extend(0..n as u32);
            b.layout.cu_seqlens.push(b.ids.len());
        }
        b
    }

    /// The layout, ids, type ids and positions, for [`crate::backend::Backend::prepare_batch`].
    pub fn inputs(&self) -> BatchInputs<'_> {
        BatchInputs {
            layouts: vec![&self.layout],
            ids: vec![&self.ids[..], &self.type_ids[..], &self.positions[..]],
            rel_index: None,
        }
    }

    pub fn num_tokens(&self) -> usize {
        self.ids.len()
    }

    pub fn shape(&self) -> BatchShape {
        BatchShape {
            tokens: self.num_tokens(),
            seqs: self.layout.num_seqs(),
            max_len: self.layout.max_len(),
        }
    }

    /// This batch followed by padding sequences (token 0, mask 0, positions from 0)
    /// up to exactly `to` (a [`crate::backend::Backend::graph_bucket`] of its shape):
    /// first one of `to.max_len` tokens if no sequence is that long, then the other
    /// padding tokens in sequences of at most that length, then empty sequences. The
    /// real rows keep their places; a row with mask 0 changes no other row.
    pub fn padded(&self, to: BatchShape) -> PackedBatch {
        let mut b = self.clone();
        for n in b.layout.pad_to(to) {
            b.ids.extend(std::iter::repeat_n(0, n));
            b.type_ids.extend(std::iter::repeat_n(0, n));
            b.positions.extend(0..n as u32);
        }
        b
    }
}

/// A key no other model instance has: what a backend caches a model's CUDA graphs
/// under ([`crate::backend::Backend::run_forward`]).
pub fn graph_key() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Index in [`BatchInputs::ids`] of the first id list a model adds after
/// [`PackedBatch::inputs`]' ids, type ids and positions.
pub const EXTRA_IDS: usize = 3;

/// A packed batch and the slots its inputs were staged under
/// ([`crate::backend::Backend::prepare_batch`]): what the ops of a forward read.
pub struct StagedBatch<'a> {
    pub batch: &'a PackedBatch,
    pub prepared: Prepared,
}

impl std::ops::Deref for StagedBatch<'_> {
    type Target = PackedBatch;
    fn deref(&self) -> &PackedBatch {
        self.batch
    }
}

impl<'a> StagedBatch<'a> {
    pub fn layout_input(&self) -> Input<'a, SeqLayout> {
        self.prepared.layout(0, &self.batch.layout)
    }
    pub fn mask_input(&self) -> Input<'a, [f32]> {
        self.prepared.mask(0, &self.batch.layout)
    }
    pub fn ids_input(&self) -> Input<'a, [u32]> {
        self.prepared.ids(0, &self.batch.ids)
    }
    pub fn type_ids_input(&self) -> Input<'a, [u32]> {
        self.prepared.ids(1, &self.batch.type_ids)
    }
    pub fn positions_input(&self) -> Input<'a, [u32]> {
        self.prepared.ids(2, &self.batch.positions)
    }
}

/// Orders items longest first and splits them into consecutive groups whose summed
/// length (`lens[i]`) stays within `budget` (a longer single item forms its own group).
pub fn token_budget_groups(lens: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut used = 0;
    for i in order {
        let l = lens[i];
        match groups.last_mut() {
            Some(g) if used + l <= budget => {
                g.push(i);
                used += l;
            }
            _ => {
                groups.push(vec![i]);
                used = l;
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::token_budget_groups;

    #[test]
    fn padding_reaches_the_bucket_and_keeps_the_rows() {
        use super::{PackedBatch, Sequence};
        use crate::backend::BatchShape;
        let seq = |n: usize| Sequence {
            ids: (1..=n as u32).collect(),
            ..Default::default()
        };
        let b = PackedBatch::pack(&[seq(5), seq(3)]);
        let to = BatchShape {
            tokens: 64,
            seqs: 8,
            max_len: 16,
        };
        let p = b.padded(to);
        assert_eq!(p.shape(), to);
        assert_eq!(p.layout.cu_seqlens, vec![0, 5, 8, 24, 40, 56, 64, 64, 64]);
        assert_eq!(&p.ids[..8], &b.ids[..]);
        assert_eq!(&p.layout.mask[..8], &b.layout.mask[..]);
        assert!(p.layout.mask[8..].iter().all(|&m| m == 0.0));
        assert_eq!(&p.positions[8..11], &[0, 1, 2]);
    }

    #[test]
    fn groups_respect_budget_and_order() {
        let lens = [300, 200, 120, 100, 90, 600];
        let g = token_budget_groups(&lens, 512);
        assert_eq!(g, vec![vec![5], vec![0, 1], vec![2, 3, 4]]);
    }
}
