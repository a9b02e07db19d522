//! Model inputs: tokenised sequences packed back to back without padding, and the
//! grouping of sequences into token-budget batches.

use crate::backend::{BatchInputs, SeqLayout};

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
    fn groups_respect_budget_and_order() {
        let lens = [300, 200, 120, 100, 90, 600];
        let g = token_budget_groups(&lens, 512);
        assert_eq!(g, vec![vec![5], vec![0, 1], vec![2, 3, 4]]);
    }
}
