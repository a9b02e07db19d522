//! Beam Retrieval search (docs/spec.md §1; canghongjian/beam_retriever @902980b,
//! `retrieval/retriever_model.py::Retriever.forward` in eval mode) as a state machine:
//! it emits the token sequences of one hop, receives their logits, and moves on.
//! It never touches a model, so the scheduler can batch many questions' hops together.
//!
//! Hop `t` (0-based) scores `[CLS] Q p̂1 … p̂t z [SEP]` for every candidate `z`, cut to
//! `B_t = min(510 − (hops−1−t)·mpl, len(prefix)+len(z))` tokens with
//! `mpl = (510 − len(Q)) // hops`; the mask covers [CLS] and the tokens but not the
//! final [SEP] (the official code's quirk, kept). Hop 0 uses the `hop1` head, later
//! hops the `hop_n` head; the score is logit column 1. For beam `i` (in rank order),
//! candidate `j` is skipped when it is in beam `i` or is the last passage of any beam
//! `0..=i`. Each hop keeps the global top-B by the current hop's score alone; the
//! answer is the top beam of the last hop.
//!
//! Fixes where the official code crashes or invents indices: with `n ≤ hops`
//! passages all `n` are returned unscored; a hop with fewer than B candidates keeps
//! them all. Paper mode ([`HopMode::Auto`], seed 003 §3.3): search while the best
//! score of a hop ≥ τ, up to `max_hops`, and return the previous hop's best chain.

use crate::model::batch::Sequence;

/// [CLS] and [SEP] ids of the DeBERTa-v3 vocabulary (the official code's config).
pub const CLS_ID: u32 = 1;
pub const SEP_ID: u32 = 2;

/// Sequence length of the official model inputs, special tokens included.
pub const MAX_LEN: usize = 512;

/// How many hops to search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HopMode {
    /// Exactly this many hops (the official code; per question from the data when
    /// `--hops from-data`).
    Fixed(usize),
    /// Paper mode: continue while the best score of a hop is ≥ `tau`, at most
    /// `max_hops` hops; truncation budgets are computed for `max_hops`.
    Auto { tau: f32, max_hops: usize },
}

impl HopMode {
    fn budget_hops(self) -> usize {
        match self {
            HopMode::Fixed(h) => h,
            HopMode::Auto { max_hops, .. } => max_hops,
        }
    }
}

/// Which classifier scores a hypothesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HopHead {
    /// `hop_classifier_layer` (first hop).
    Hop1,
    /// `hop_n_classifier_layer` (later hops).
    HopN,
}

/// One candidate chain of the current hop.
#[derive(Debug, Clone, PartialEq)]
struct Candidate {
    chain: Vec<usize>,
    /// `Q p̂1 … z` cut to the hop budget (the next hop's prefix).
    tokens: Vec<u32>,
    /// Scores of the chain's earlier hops.
    hop_scores: Vec<f32>,
}

/// A beam kept after a hop.
#[derive(Debug, Clone, PartialEq)]
pub struct Beam {
    /// Passage indices in hop order.
    pub chain: Vec<usize>,
    /// Score of the chain at each hop (logit column 1 of that hop's head).
    pub hop_scores: Vec<f32>,
    tokens: Vec<u32>,
}

impl Beam {
    /// Score at the last hop (what the search ranks by).
    pub fn score(&self) -> f32 {
        *self.hop_scores.last().expect("a beam has at least one hop")
    }
}

/// What the search found for one question.
#[derive(Debug, Clone, PartialEq)]
pub struct BeamResult {
    /// The answer chain (top beam of the last hop searched).
    pub chain: Vec<usize>,
    /// Its per-hop scores (empty when the passages were returned unscored).
    pub hop_scores: Vec<f32>,
    /// All beams of the last hop searched, best first.
    pub beams: Vec<Beam>,
    /// Hop-1 logits `[n, 2]` of every candidate, in passage order.
    pub hop1_logits: Vec<[f32; 2]>,
}

/// Search state of one question.
#[derive(Debug, Clone)]
pub struct BeamSearch {
    beam_size: usize,
    mode: HopMode,
    passages: Vec<Vec<u32>>,
    /// `mpl`: the per-passage share of the token budget.
    mean_passage_len: usize,
    /// 0-based index of the hop whose candidates are pending.
    hop: usize,
    beams: Vec<Beam>,
    pending: Vec<Candidate>,
    hop1_logits: Vec<[f32; 2]>,
    result: Option<BeamResult>,
}

impl BeamSearch {
    /// Starts a search over tokenised passages (see [`truncate_inputs`]). `beam_size`
    /// and the hop count must be ≥ 1.
    pub fn new(
        question: Vec<u32>,
        passages: Vec<Vec<u32>>,
        beam_size: usize,
        mode: HopMode,
    ) -> Self {
        assert!(beam_size >= 1, "beam size must be at least 1");
        let hops = mode.budget_hops();
        assert!(hops >= 1, "at least one hop");
        let question_len = question.len();
        let mut s = Self {
            beam_size,
            mode,
            mean_passage_len: (MAX_LEN - 2).saturating_sub(question_len) / hops,
            passages,
            hop: 0,
            beams: Vec::new(),
            pending: Vec::new(),
            hop1_logits: Vec::new(),
            result: None,
        };
        let n = s.passages.len();
        if matches!(mode, HopMode::Fixed(h) if n <= h) || n == 0 {
            s.result = Some(BeamResult {
                chain: (0..n).collect(),
                hop_scores: Vec::new(),
                beams: Vec::new(),
                hop1_logits: Vec::new(),
            });
            return s;
        }
        let budget = s.budget(0);
        s.pending = (0..n)
            .map(|j| Candidate {
                chain: vec![j],
                tokens: concat_cut(&question, &s.passages[j], budget),
                hop_scores: Vec::new(),
            })
            .collect();
        s
    }

    /// Token budget of hop `t`: `510 − (hops−1−t)·mpl`.
    fn budget(&self, t: usize) -> usize {
        let hops = self.mode.budget_hops();
        (MAX_LEN - 2).saturating_sub((hops - 1 - t) * self.mean_passage_len)
    }

    /// The head that scores the pending hypotheses.
    pub fn head(&self) -> HopHead {
        if self.hop == 0 {
            HopHead::Hop1
        } else {
            HopHead::HopN
        }
    }

    /// Model inputs of the pending hop: `[CLS] tokens [SEP]`, mask 0 on the final [SEP].
    pub fn hypotheses(&self) -> impl Iterator<Item = Sequence> + '_ {
        self.pending.iter().map(|c| model_input(&c.tokens))
    }

    /// Number of pending hypotheses (0 once finished).
    pub fn num_pending(&self) -> usize {
        self.pending.len()
    }

    /// The result, once the search has finished.
    pub fn result(&self) -> Option<&BeamResult> {
        self.result.as_ref()
    }

    /// Feeds the logits `[.., 2]` of the pending hypotheses (in the order of
    /// [`BeamSearch::hypotheses`]) and prepares the next hop or finishes.
    pub fn feed(&mut self, logits: &[[f32; 2]]) {
        assert_eq!(
            logits.len(),
            self.pending.len(),
            "one logit pair per hypothesis"
        );
        assert!(self.result.is_none(), "search already finished");
        if self.hop == 0 {
            self.hop1_logits = logits.to_vec();
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        // Highest score first; ties keep the lower index (stable sort).
        order.sort_by(|&a, &b| logits[b][1].total_cmp(&logits[a][1]));
        let best = logits[order[0]][1];
        let pending = std::mem::take(&mut self.pending);
        let kept: Vec<Beam> = order
            .into_iter()
            .take(self.beam_size)
            .map(|k| {
                let c = &pending[k];
                let mut hop_scores = c.hop_scores.clone();
                hop_scores.push(logits[k][1]);
                Beam {
                    chain: c.chain.clone(),
                    hop_scores,
                    tokens: c.tokens.clone(),
                }
            })
            .collect();

        if let HopMode::Auto { tau, .. } = self.mode {
            if self.hop > 0 && best < tau {
                // Paper mode: this hop is not confident; answer with the previous hop.
                return self.finish();
            }
        }
        let last_hop = self.hop + 1 >= self.mode.budget_hops();
        self.beams = kept;
        if last_hop {
            return self.finish();
        }
        self.hop += 1;
        self.pending = self.expand();
        if self.pending.is_empty() {
            self.finish();
        }
    }

    /// Candidates of the next hop from the current beams (official duplicate rule).
    fn expand(&self) -> Vec<Candidate> {
        let budget = self.budget(self.hop);
        let mut last_of_beams = Vec::new();
        let mut out = Vec::new();
        for beam in &self.beams {
            last_of_beams.push(*beam.chain.last().expect("non-empty chain"));
            for (j, z) in self.passages.iter().enumerate() {
                if beam.chain.contains(&j) || last_of_beams.contains(&j) {
                    continue;
                }
                let mut chain = beam.chain.clone();
                chain.push(j);
                out.push(Candidate {
                    chain,
                    tokens: concat_cut(&beam.tokens, z, budget),
                    hop_scores: beam.hop_scores.clone(),
                });
            }
        }
        out
    }

    /// Ends the search with the current beams (the previous hop's, on a τ exit).
    fn finish(&mut self) {
        let beams = std::mem::take(&mut self.beams);
        let top = beams.first().expect("at least one beam");
        self.result = Some(BeamResult {
            chain: top.chain.clone(),
            hop_scores: top.hop_scores.clone(),
            beams,
            hop1_logits: std::mem::take(&mut self.hop1_logits),
        });
        self.pending.clear();
    }
}

impl crate::pipeline::Strategy for BeamSearch {
    type Output = BeamResult;

    /// Head index 0 is `hop1`, 1 is `hop_n` (the order the `beam` command loads them).
    fn requests(&self) -> Vec<(Sequence, usize)> {
        let head = self.head() as usize;
        self.hypotheses().map(|s| (s, head)).collect()
    }

    fn feed(&mut self, logits: Vec<Vec<f32>>) {
        let pairs: Vec<[f32; 2]> = logits.iter().map(|l| [l[0], l[1]]).collect();
        BeamSearch::feed(self, &pairs);
    }

    fn take_output(&mut self) -> Option<BeamResult> {
        self.result.take()
    }
}

/// `concat(prefix, z)[:min(budget, len(prefix)+len(z))]`.
fn concat_cut(prefix: &[u32], z: &[u32], budget: usize) -> Vec<u32> {
    prefix.iter().chain(z).copied().take(budget).collect()
}

/// `[CLS] tokens [SEP]` with the attention mask on [CLS] and the tokens only.
pub fn model_input(tokens: &[u32]) -> Sequence {
    let mut ids = Vec::with_capacity(tokens.len() + 2);
    ids.push(CLS_ID);
    ids.extend_from_slice(tokens);
    ids.push(SEP_ID);
    let mut mask = vec![1u8; ids.len()];
    *mask.last_mut().expect("non-empty") = 0;
    Sequence {
        ids,
        type_ids: Vec::new(),
        mask,
    }
}

/// The official truncation of the inputs: the question to 510 tokens, each passage to
/// `512 − len(question)` tokens.
pub fn truncate_inputs(
    mut question: Vec<u32>,
    mut passages: Vec<Vec<u32>>,
) -> (Vec<u32>, Vec<Vec<u32>>) {
    question.truncate(MAX_LEN - 2);
    let room = MAX_LEN - question.len();
    for p in &mut passages {
        p.truncate(room);
    }
    (question, passages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passages(n: usize, len: usize) -> Vec<Vec<u32>> {
        (0..n).map(|j| vec![100 + j as u32; len]).collect()
    }

    /// Scores each chain by a table lookup of its last passage (and hop).
    fn run(search: &mut BeamSearch, score: impl Fn(&[u32], usize) -> f32) {
        let mut hop = 0;
        while search.result().is_none() {
            let logits: Vec<[f32; 2]> = search
                .hypotheses()
                .map(|s| [0.0, score(&s.ids, hop)])
                .collect();
            search.feed(&logits);
            hop += 1;
        }
    }

    /// Last passage of a model input (passages are runs of one id `100 + j`).
    fn last_passage(ids: &[u32]) -> usize {
        (ids[ids.len() - 2] - 100) as usize
    }

    #[test]
    fn two_hops_beam_two_follow_the_official_duplicate_rule() {
        let mut s = BeamSearch::new(vec![7; 4], passages(4, 3), 2, HopMode::Fixed(2));
        assert_eq!(s.num_pending(), 4);
        assert_eq!(s.head(), HopHead::Hop1);
        // Hop 1: passage 2 best, then 0.
        s.feed(&[[0.0, 0.5], [0.0, -1.0], [0.0, 3.0], [0.0, -2.0]]);
        assert_eq!(s.head(), HopHead::HopN);
        let chains: Vec<Vec<usize>> = s.pending.iter().map(|c| c.chain.clone()).collect();
        // Beam [2]: all but 2. Beam [0]: neither 0 nor 2 (last passage of beam 0).
        assert_eq!(
            chains,
            vec![vec![2, 0], vec![2, 1], vec![2, 3], vec![0, 1], vec![0, 3]]
        );
        s.feed(&[[0.0, 1.0], [0.0, 4.0], [0.0, 0.0], [0.0, 5.0], [0.0, 2.0]]);
        let r = s.result().unwrap();
        assert_eq!(r.chain, vec![0, 1]);
        assert_eq!(r.hop_scores, vec![0.5, 5.0]);
        assert_eq!(r.beams[1].chain, vec![2, 1]);
        assert_eq!(r.hop1_logits.len(), 4);
    }

    #[test]
    fn inputs_follow_the_budget_and_the_sep_mask_quirk() {
        // |Q| = 10, 3 hops: mpl = (510 − 10) / 3 = 166; hop budgets 178, 344, 510.
        let q = vec![7u32; 10];
        let mut s = BeamSearch::new(q, passages(5, 300), 1, HopMode::Fixed(3));
        let first: Vec<Sequence> = s.hypotheses().collect();
        assert_eq!(first[0].ids.len(), 178 + 2);
        assert_eq!(first[0].ids[0], CLS_ID);
        assert_eq!(*first[0].ids.last().unwrap(), SEP_ID);
        assert_eq!(first[0].mask.iter().filter(|&&m| m == 1).count(), 179);
        assert_eq!(*first[0].mask.last().unwrap(), 0);
        s.feed(&[[0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]);
        let second: Vec<Sequence> = s.hypotheses().collect();
        // Prefix = Q + 168 tokens of passage 0 (cut at 178), then passage j to 344.
        assert_eq!(second[0].ids.len(), 344 + 2);
        assert_eq!(&second[0].ids[11..179], &[100u32; 168][..]);
        assert_eq!(second[0].ids[179], 101);
    }

    #[test]
    fn few_passages_are_returned_unscored() {
        let s = BeamSearch::new(vec![7], passages(2, 3), 2, HopMode::Fixed(2));
        assert_eq!(s.num_pending(), 0);
        assert_eq!(s.result().unwrap().chain, vec![0, 1]);
    }

    #[test]
    fn a_hop_with_fewer_candidates_than_the_beam_keeps_them_all() {
        let mut s = BeamSearch::new(vec![7], passages(3, 2), 5, HopMode::Fixed(2));
        run(&mut s, |ids, _| last_passage(ids) as f32);
        let r = s.result().unwrap();
        // Hop 1 keeps all 3; hop 2: beam [2] → 0, 1; beam [1] → 0; beam [0] → none.
        assert_eq!(r.beams.len(), 3);
        assert_eq!(r.chain, vec![2, 1]);
    }

    #[test]
    fn paper_mode_stops_when_the_best_score_falls_below_tau() {
        // Hop 2 best 0.5 ≥ −1 continues; hop 3 best −2 < −1 stops: answer = hop-2 best.
        let mut s = BeamSearch::new(
            vec![7],
            passages(6, 2),
            2,
            HopMode::Auto {
                tau: -1.0,
                max_hops: 4,
            },
        );
        run(&mut s, |ids, hop| match hop {
            0 => last_passage(ids) as f32,
            1 => 0.5 - last_passage(ids) as f32 * 0.01,
            _ => -2.0,
        });
        let r = s.result().unwrap();
        assert_eq!(r.chain.len(), 2);
        assert_eq!(r.chain, vec![5, 0]);
        // And it never goes past max_hops.
        let mut s = BeamSearch::new(
            vec![7],
            passages(6, 2),
            1,
            HopMode::Auto {
                tau: -1.0,
                max_hops: 3,
            },
        );
        run(&mut s, |ids, _| last_passage(ids) as f32);
        assert_eq!(s.result().unwrap().chain.len(), 3);
    }

    #[test]
    fn truncation_keeps_the_question_within_the_budget() {
        let (q, p) = truncate_inputs(vec![1; 600], vec![vec![2; 50]]);
        assert_eq!(q.len(), 510);
        assert_eq!(p[0].len(), 2);
        let (q, p) = truncate_inputs(vec![1; 12], vec![vec![2; 600]]);
        assert_eq!((q.len(), p[0].len()), (12, 500));
    }
}
