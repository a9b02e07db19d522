//! Shared-prefix reuse for causal LMs: sequences of a batch that start with the same
//! tokens (LEPUS paths with the same first passage) run that prefix through the
//! projections and MLPs once.
//!
//! Each group's prefix is packed once, followed by every member's suffix (positions
//! continue after the prefix). Attention is the only op that mixes rows, so only it
//! sees the members whole: the packed `q|k|v` rows are gathered into one virtual
//! sequence `[prefix ; suffix]` per member, attended causally, and each packed row
//! takes its output back (a prefix row from its group's first member, where the causal
//! mask makes it equal in all of them; the other members' prefix rows are only keys,
//! their queries not computed). Every other op is row-wise, so the scores equal those
//! of the unshared batch.

use crate::backend::{BatchShape, SeqLayout};
use crate::model::batch::PackedBatch;

/// How a batch of token sequences is packed with shared prefixes.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixPlan {
    /// Packed tokens: per group, the prefix and then each member's suffix.
    pub batch: PackedBatch,
    /// Packed rows of the virtual sequences `[prefix ; suffix]`, one per input
    /// sequence, concatenated (the attention input is `qkv` gathered at these rows).
    pub attn_rows: Vec<usize>,
    /// The virtual sequences' layout (all tokens unmasked).
    pub attn_layout: SeqLayout,
    /// Per virtual sequence, its first row whose attention output is read back (the
    /// rows before it are a prefix read back from another member): the attention's
    /// `first_query`.
    pub attn_first_query: Vec<u32>,
    /// For each packed row, its row in the attention output.
    pub back_rows: Vec<usize>,
    /// For each input sequence and token, its packed row.
    pub token_rows: Vec<Vec<usize>>,
}

impl PrefixPlan {
    /// This plan with its packed batch and its virtual sequences each padded to their
    /// `bucket` (a [`crate::backend::Backend::graph_bucket`]; `None` without graphs), so
    /// that one CUDA graph serves every plan of the same buckets: padding virtual
    /// sequences (mask 0) read packed row 0, padding packed rows take attention row 0
    /// back, and neither reaches a real row.
    pub fn padded(&self, bucket: impl Fn(BatchShape) -> Option<BatchShape>) -> Option<PrefixPlan> {
        let batch = self.batch.padded(bucket(self.batch.shape())?);
        let mut attn_layout = self.attn_layout.clone();
        let added: usize = attn_layout
            .pad_to(bucket(self.attn_layout.shape())?)
            .iter()
            .sum();
        let mut attn_rows = self.attn_rows.clone();
        attn_rows.extend(std::iter::repeat_n(0, added));
        let mut attn_first_query = self.attn_first_query.clone();
        attn_first_query.resize(attn_layout.num_seqs(), 0);
        let mut back_rows = self.back_rows.clone();
        back_rows.resize(batch.num_tokens(), 0);
        Some(PrefixPlan {
            batch,
            attn_rows,
            attn_layout,
            attn_first_query,
            back_rows,
            token_rows: self.token_rows.clone(),
        })
    }

    /// Groups `seqs` by shared prefixes of at least `min_shared` tokens (a suffix keeps
    /// at least one token). `None` when nothing is shared.
    pub fn new(seqs: &[&[u32]], min_shared: usize) -> Option<Self> {
        let groups = group(seqs, min_shared.max(1));
        if groups.iter().all(|g| g.members.len() < 2) {
            return None;
        }
        let mut batch = PackedBatch::pack(std::iter::empty());
        let mut token_rows = vec![Vec::new(); seqs.len()];
        let push = |batch: &mut PackedBatch, ids: &[u32], first_pos: usize| {
            let start = batch.ids.len();
            batch.ids.extend_from_slice(ids);
            batch.type_ids.extend(std::iter::repeat_n(0, ids.len()));
            batch
                .positions
                .extend((first_pos..first_pos + ids.len()).map(|p| p as u32));
            batch
                .layout
                .mask
                .extend(std::iter::repeat_n(1.0, ids.len()));
            batch.layout.cu_seqlens.push(batch.ids.len());
            start
        };
        for g in &groups {
            let lead = seqs[g.members[0]];
            let prefix_start = (g.prefix > 0).then(|| push(&mut batch, &lead[..g.prefix], 0));
            for &m in &g.members {
                let s = seqs[m];
                let suffix_start = push(&mut batch, &s[g.prefix..], g.prefix);
                let prefix_rows = prefix_start.map_or(0..0, |p| p..p + g.prefix);
                token_rows[m] = prefix_rows
                    .chain(suffix_start..suffix_start + s.len() - g.prefix)
                    .collect();
            }
        }
        let mut attn_rows = Vec::with_capacity(token_rows.iter().map(Vec::len).sum());
        let mut cu = vec![0];
        let mut back_rows = vec![usize::MAX; batch.ids.len()];
        let mut attn_first_query = Vec::with_capacity(token_rows.len());
        for rows in &token_rows {
            // The rows read back from here: all but a prefix another member holds.
            let first = rows.partition_point(|&r| back_rows[r] != usize::MAX);
            debug_assert!(rows[first..].iter().all(|&r| back_rows[r] == usize::MAX));
            attn_first_query.push(first as u32);
            for &r in rows {
                if back_rows[r] == usize::MAX {
                    back_rows[r] = attn_rows.len();
                }
                attn_rows.push(r);
            }
            cu.push(attn_rows.len());
        }
        debug_assert!(back_rows.iter().all(|&r| r != usize::MAX));
        let attn_layout = SeqLayout {
            mask: vec![1.0; attn_rows.len()],
            cu_seqlens: cu,
        };
        Some(Self {
            batch,
            attn_rows,
            attn_layout,
            attn_first_query,
            back_rows,
            token_rows,
        })
    }

    /// Tokens that run through the projections and MLPs (the unshared batch runs
    /// `Σ len`).
    pub fn packed_tokens(&self) -> usize {
        self.batch.ids.len()
    }
}

/// Sequences sharing their first `prefix` tokens.
struct Group {
    prefix: usize,
    members: Vec<usize>,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Sorted order puts sequences with long common prefixes next to each other. A
/// sequence joins the previous group when it shares at least `min_shared` tokens with
/// the group's first member and does not shorten a prefix already shared by two.
fn group(seqs: &[&[u32]], min_shared: usize) -> Vec<Group> {
    let mut order: Vec<usize> = (0..seqs.len()).collect();
    order.sort_by(|&a, &b| seqs[a].cmp(seqs[b]).then(a.cmp(&b)));
    let mut groups: Vec<Group> = Vec::new();
    for i in order {
        let s = seqs[i];
        let joined = groups.last_mut().is_some_and(|g| {
            let lead = seqs[g.members[0]];
            // Every member keeps at least one token of its own.
            let shared = common_prefix(lead, s)
                .min(s.len().saturating_sub(1))
                .min(lead.len().saturating_sub(1));
            let ok = shared >= min_shared && (g.members.len() == 1 || shared >= g.prefix);
            if ok {
                if g.members.len() == 1 {
                    g.prefix = shared;
                }
                g.members.push(i);
            }
            ok
        });
        if !joined {
            groups.push(Group {
                prefix: 0,
                members: vec![i],
            });
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_prefixes_and_maps_every_token_back() {
        let a = [1u32, 2, 3, 4, 5];
        let b = [1u32, 2, 3, 9];
        let c = [7u32, 8];
        let d = [1u32, 2, 3, 4, 6, 6];
        let seqs: Vec<&[u32]> = vec![&a, &b, &c, &d];
        let plan = PrefixPlan::new(&seqs, 2).unwrap();
        // a and d share [1, 2, 3, 4]; b would shorten that prefix and c shares nothing.
        assert_eq!(plan.packed_tokens(), 4 + 1 + 2 + 4 + 2);
        for (k, s) in seqs.iter().enumerate() {
            let rows = &plan.token_rows[k];
            let ids: Vec<u32> = rows.iter().map(|&r| plan.batch.ids[r]).collect();
            assert_eq!(&ids, s, "sequence {k} reassembles");
            let pos: Vec<u32> = rows.iter().map(|&r| plan.batch.positions[r]).collect();
            assert_eq!(pos, (0..s.len() as u32).collect::<Vec<_>>());
        }
        // Attention sees each sequence whole, in input order.
        let lens: Vec<usize> = plan
            .attn_layout
            .cu_seqlens
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect();
        assert_eq!(lens, vec![5, 4, 2, 6]);
        for (r, &back) in plan.back_rows.iter().enumerate() {
            assert_eq!(plan.attn_rows[back], r);
        }
        // d's queries start after the prefix a holds; every row read back is computed.
        assert_eq!(plan.attn_first_query, vec![0, 0, 0, 4]);
        let cu = &plan.attn_layout.cu_seqlens;
        for &back in &plan.back_rows {
            let s = cu.partition_point(|&c| c <= back) - 1;
            assert!(
                back >= cu[s] + plan.attn_first_query[s] as usize,
                "row {back}"
            );
        }
    }

    #[test]
    fn nothing_shared_gives_no_plan() {
        let a = [1u32, 2, 3];
        let b = [4u32, 5, 6];
        assert!(PrefixPlan::new(&[&a, &b], 1).is_none());
        assert!(PrefixPlan::new(&[&a, &[1, 2, 7]], 3).is_none());
        assert!(PrefixPlan::new(&[&[], &a], 1).is_none());
    }

    #[test]
    fn identical_sequences_keep_one_suffix_token_each() {
        let a = [1u32, 2, 3];
        let plan = PrefixPlan::new(&[&a, &a], 1).unwrap();
        assert_eq!(plan.packed_tokens(), 2 + 1 + 1);
    }
}
