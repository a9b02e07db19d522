//! The scheduler of the question runs, the engine of the question jobs
//! ([`super::engine`]): it mixes the hypotheses of many admitted questions and hops
//! into token-budget batches, runs the model, and sends each finished question, tagged
//! with its input row, as soon as it finishes. The channels are bounded, so memory
//! stays flat on any input size.
//!
//! Continuous batching: when the last pending hypothesis of a question's hop is
//! scored, its next hop is queued at once, alongside other questions' hops. Batches
//! are filled oldest question first (then sorted longest first), so questions finish
//! roughly in input order and the writer can commit its parts early.
//!
//! A stop (Ctrl-C, SIGTERM: [`crate::stop::INTERRUPTED`]) is taken between forward
//! passes: the questions in flight, and those admitted but not yet read, are sent back
//! as [`Finished::Left`] for `--resume`, instead of being searched to the end (which
//! takes hours with real models and `--max-active` questions in flight).

use std::time::Instant;

use anyhow::Result;
use crossbeam_channel::{Receiver, Sender};

use super::engine::{Admission, Finished, PipelineStats};
use crate::model::batch::Sequence;

/// A per-question search the scheduler drives: the contract every question job's task
/// (a search of `strategy/` with what its output needs) implements.
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

/// Scheduling limits.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct SchedulerConfig {
    /// Token budget of one forward pass.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SchedulerConfig::default().max_batch_tokens,
        value_parser = crate::options::values::positive_usize))]
    pub max_batch_tokens: usize,
    /// Questions in flight at once: more mixes the steps of different questions
    /// better, and holds more memory.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = SchedulerConfig::default().max_active,
        value_parser = crate::options::values::positive_usize))]
    pub max_active: usize,
}

impl SchedulerConfig {
    /// Refuses a limit below 1, naming it.
    pub fn check(&self) -> Result<()> {
        crate::options::at_least_one("max_batch_tokens", self.max_batch_tokens)?;
        crate::options::at_least_one("max_active", self.max_active)?;
        crate::options::at_most(
            "max_batch_tokens",
            self.max_batch_tokens,
            1 << 24,
            "one pass's buffers grow with it",
        )?;
        crate::options::at_most(
            "max_active",
            self.max_active,
            1 << 16,
            "the queue of admitted questions is sized by it",
        )
    }
}

impl Default for SchedulerConfig {
    /// The CLI's defaults: 16384 tokens per pass, 64 questions in flight.
    fn default() -> Self {
        Self {
            max_batch_tokens: 16384,
            max_active: 64,
        }
    }
}

struct Active<S> {
    row: u64,
    task: S,
    /// Logits received for the current step, by request index.
    logits: Vec<Option<Vec<f32>>>,
    outstanding: usize,
}

struct Queued {
    /// The question's row: older questions are scored first.
    row: u64,
    slot: usize,
    index: usize,
    seq: Sequence,
    head: usize,
}

/// The engine of the question jobs: scores the tasks admitted on `admit_rx` in
/// token-budget batches (`score`: sequences and head indices → logits per sequence)
/// and sends each finished question to `done_tx`; `progress` is called after each
/// batch. Both limits of `config` must be at least 1. Stops before the next forward
/// pass once a stop is requested (see the module doc).
pub fn run<S: Strategy>(
    config: SchedulerConfig,
    admit_rx: Receiver<(u64, Admission<S>)>,
    done_tx: Sender<(u64, Finished<S::Output>)>,
    mut score: impl FnMut(&[Sequence], &[usize]) -> Result<Vec<Vec<f32>>>,
    mut progress: impl FnMut(&PipelineStats),
) -> Result<PipelineStats> {
    config.check()?;
    let mut stats = PipelineStats::default();
    let mut slots: Vec<Option<Active<S>>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut queue: Vec<Queued> = Vec::new();
    let mut queued_tokens = 0usize;
    let done = |row: u64, item: Finished<S::Output>| {
        done_tx
            .send((row, item))
            .map_err(|_| anyhow::anyhow!("the writer stopped early"))
    };
    let mut reader_done = false;
    loop {
        // Admit until two batches' worth are queued or enough questions are in flight.
        while !reader_done
            && slots.len() - free.len() < config.max_active
            && queued_tokens < 2 * config.max_batch_tokens
        {
            let Ok((row, admission)) = admit_rx.recv() else {
                reader_done = true;
                break;
            };
            stats.rows += 1;
            match admission {
                Admission::Bad(bad) => {
                    stats.bad_rows += 1;
                    done(row, Finished::Bad(bad))?;
                }
                Admission::Task(mut task) => {
                    let requests = task.requests();
                    if requests.is_empty() {
                        let out = task
                            .take_output()
                            .expect("a search with no requests has finished");
                        done(row, Finished::Done(out))?;
                        continue;
                    }
                    let slot = free.pop().unwrap_or_else(|| {
                        slots.push(None);
                        slots.len() - 1
                    });
                    let n = requests.len();
                    queued_tokens += enqueue(&mut queue, row, slot, requests);
                    slots[slot] = Some(Active {
                        row,
                        task,
                        logits: vec![None; n],
                        outstanding: n,
                    });
                }
            }
        }
        if queue.is_empty() {
            // Admission above blocks until the reader sends or finishes, and it always
            // runs when nothing is queued (limits ≥ 1), so this never spins.
            if reader_done {
                return Ok(stats);
            }
            continue;
        }

        if crate::stop::stop_point().is_err() {
            // Rows left for `--resume` are not counted as done (as the row jobs count).
            for active in slots.iter().flatten() {
                stats.rows -= 1;
                done(active.row, Finished::Left)?;
            }
            // The reader sends no row after a stop; what it sent before is left too.
            for (row, _) in admit_rx.iter() {
                done(row, Finished::Left)?;
            }
            return Ok(stats);
        }
        let (batch, used) = take_batch(&mut queue, config.max_batch_tokens);
        queued_tokens -= used;
        let seqs: Vec<Sequence> = batch.iter().map(|q| q.seq.clone()).collect();
        let heads: Vec<usize> = batch.iter().map(|q| q.head).collect();
        let t = Instant::now();
        let logits = score(&seqs, &heads)?;
        stats.forward += t.elapsed();
        stats.batches += 1;
        stats.hypotheses += batch.len() as u64;
        stats.tokens += used as u64;

        for (q, l) in batch.into_iter().zip(logits) {
            let active = slots[q.slot].as_mut().expect("queued for a live slot");
            active.logits[q.index] = Some(l);
            active.outstanding -= 1;
            if active.outstanding > 0 {
                continue;
            }
            let step: Vec<Vec<f32>> = std::mem::take(&mut active.logits)
                .into_iter()
                .map(|l| l.expect("all logits of the step received"))
                .collect();
            active.task.feed(step);
            let requests = active.task.requests();
            if requests.is_empty() {
                let mut finished = slots[q.slot].take().expect("live slot");
                free.push(q.slot);
                let out = finished
                    .task
                    .take_output()
                    .expect("a finished search has an output");
                done(finished.row, Finished::Done(out))?;
            } else {
                let n = requests.len();
                queued_tokens += enqueue(&mut queue, active.row, q.slot, requests);
                active.logits = vec![None; n];
                active.outstanding = n;
            }
        }
        progress(&stats);
    }
}

/// Takes the next batch off `queue`: the oldest questions' requests first, each that
/// fits the token budget (the first one always), sorted longest first. Returns the
/// batch and its token count.
fn take_batch(queue: &mut Vec<Queued>, budget: usize) -> (Vec<Queued>, usize) {
    queue.sort_by_key(|q| (q.row, std::cmp::Reverse(q.seq.ids.len())));
    let mut used = 0;
    let mut batch = Vec::new();
    let mut rest = Vec::with_capacity(queue.len());
    for q in queue.drain(..) {
        let len = q.seq.ids.len();
        if used < budget && (batch.is_empty() || used + len <= budget) {
            used += len;
            batch.push(q);
        } else {
            rest.push(q);
        }
    }
    *queue = rest;
    batch.sort_by_key(|q| std::cmp::Reverse(q.seq.ids.len()));
    (batch, used)
}

/// Queues the requests of one step of the question in `row`; returns their token
/// count.
fn enqueue(
    queue: &mut Vec<Queued>,
    row: u64,
    slot: usize,
    requests: Vec<(Sequence, usize)>,
) -> usize {
    let mut tokens = 0;
    for (index, (seq, head)) in requests.into_iter().enumerate() {
        tokens += seq.ids.len();
        queue.push(Queued {
            row,
            slot,
            index,
            seq,
            head,
        });
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::quarantine::BadRow;
    use crate::pipeline::engine::{drive, Engine, Status};

    /// Needs `steps` steps of `width` requests each; a request's sequence has
    /// `len + step` tokens; the output is the sum of all logits it received.
    struct Fake {
        id: u64,
        steps: usize,
        width: usize,
        len: usize,
        step: usize,
        sum: f32,
    }

    impl Strategy for Fake {
        type Output = (u64, f32, usize);
        fn requests(&self) -> Vec<(Sequence, usize)> {
            if self.step == self.steps {
                return Vec::new();
            }
            (0..self.width)
                .map(|k| {
                    let seq = Sequence {
                        ids: vec![k as u32; self.len + self.step],
                        ..Default::default()
                    };
                    (seq, self.step % 2)
                })
                .collect()
        }
        fn feed(&mut self, logits: Vec<Vec<f32>>) {
            assert_eq!(logits.len(), self.width);
            self.sum += logits.iter().map(|l| l[0]).sum::<f32>();
            self.step += 1;
        }
        fn take_output(&mut self) -> Option<Self::Output> {
            (self.step == self.steps).then_some((self.id, self.sum, self.steps))
        }
    }

    /// The scheduler as an engine, recording the largest batch and whether heads mix.
    struct FakeEngine {
        config: SchedulerConfig,
        max_batch: usize,
        mixed_heads: bool,
    }

    impl Engine for FakeEngine {
        type Task = Fake;
        type Out = (u64, f32, usize);
        fn queue_rows(&self) -> usize {
            self.config.max_active
        }
        fn run(
            &mut self,
            rx: Receiver<(u64, Admission<Fake>)>,
            tx: Sender<(u64, Finished<Self::Out>)>,
            _: Status,
        ) -> Result<PipelineStats> {
            let (max_batch, mixed_heads) = (&mut self.max_batch, &mut self.mixed_heads);
            run(
                self.config,
                rx,
                tx,
                |seqs, heads| {
                    *max_batch = (*max_batch).max(seqs.iter().map(|s| s.ids.len()).sum());
                    *mixed_heads |= heads.windows(2).any(|w| w[0] != w[1]);
                    Ok(seqs.iter().map(|s| vec![s.ids.len() as f32]).collect())
                },
                |_| {},
            )
        }
    }

    #[test]
    fn every_row_comes_out_once_within_the_token_budget() {
        let budget = 100;
        let mut engine = FakeEngine {
            config: SchedulerConfig {
                max_batch_tokens: budget,
                max_active: 4,
            },
            max_batch: 0,
            mixed_heads: false,
        };
        let (stats, mut out) = drive(
            &mut engine,
            |tx| {
                for id in 0..20u64 {
                    let item = if id % 7 == 3 {
                        Admission::Bad(BadRow {
                            row: id,
                            id: Some(id.to_string()),
                            reason: "bad".into(),
                        })
                    } else {
                        // Later rows need fewer steps, so they finish first.
                        Admission::Task(Fake {
                            id,
                            steps: (20 - id as usize) % 4,
                            width: 3,
                            len: 5 + id as usize,
                            step: 0,
                            sum: 0.0,
                        })
                    };
                    tx.send((id, item)).unwrap();
                }
                Ok(())
            },
            |rx| {
                Ok(rx
                    .into_iter()
                    .map(|(row, item)| match item {
                        Finished::Done((id, sum, _)) => {
                            assert_eq!(row, id);
                            (id, sum)
                        }
                        Finished::Bad(b) => (b.row, -1.0),
                        Finished::Left => unreachable!("no stop is requested"),
                    })
                    .collect::<Vec<_>>())
            },
            &|_| {},
        )
        .unwrap();
        let (max_batch, mixed_heads) = (engine.max_batch, engine.mixed_heads);
        // Rows finish out of order, but a row can overtake only the questions in
        // flight with it (at most max_active).
        for (k, r) in out.iter().enumerate() {
            assert!(r.0 as usize <= k + 4, "row {} came out {k}th", r.0);
        }
        out.sort_by_key(|r| r.0);
        let ids: Vec<u64> = out.iter().map(|r| r.0).collect();
        assert_eq!(ids, (0..20).collect::<Vec<_>>());
        for &(id, sum) in out.iter() {
            if id % 7 == 3 {
                assert_eq!(sum, -1.0);
            } else {
                let (steps, len) = ((20 - id as usize) % 4, 5 + id as usize);
                let want: usize = (0..steps).map(|s| 3 * (len + s)).sum();
                assert_eq!(sum, want as f32, "row {id}");
            }
        }
        assert!(max_batch <= budget, "a batch used {max_batch} tokens");
        assert!(mixed_heads, "hops of different questions share batches");
        assert_eq!((stats.rows, stats.bad_rows), (20, 3));
    }
}
