//! The streaming pipeline: a reader thread admits prepared questions, the scheduler
//! (on the calling thread) mixes the hypotheses of many questions and hops into
//! token-budget batches sorted by length and runs the model, and a writer thread
//! receives finished questions in input order. Channels are bounded, so memory stays
//! flat on any input size.
//!
//! Continuous batching: when the last pending hypothesis of a question's hop is
//! scored, its next hop is queued at once, alongside other questions' hops.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use crossbeam_channel::{bounded, Receiver, Sender};

use crate::io::quarantine::BadRow;
use crate::model::batch::Sequence;
use crate::strategy::Strategy;

/// One input row after the reader: a ready search or a bad row.
pub enum Admission<S> {
    Task(S),
    Bad(BadRow),
}

/// One finished input row, in input order.
pub enum Finished<O> {
    Done(O),
    Bad(BadRow),
}

/// Scheduling limits.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerConfig {
    /// Tokens per forward pass.
    pub max_batch_tokens: usize,
    /// Questions in flight at once (bounds memory and the reorder buffer).
    pub max_active: usize,
}

/// Counters of a run.
#[derive(Debug, Default, Clone, Copy)]
pub struct PipelineStats {
    pub rows: u64,
    pub bad_rows: u64,
    pub hypotheses: u64,
    pub tokens: u64,
    pub batches: u64,
    /// Time in forward passes; the rest of `wall` is I/O and scheduling that compute
    /// did not hide.
    pub forward: Duration,
    pub wall: Duration,
}

struct Active<S> {
    row: u64,
    task: S,
    /// Logits received for the current step, by request index.
    logits: Vec<Option<Vec<f32>>>,
    outstanding: usize,
}

struct Queued {
    slot: usize,
    index: usize,
    seq: Sequence,
    head: usize,
}

/// Runs the pipeline. `read` sends admissions in input order (on its own thread);
/// `score` runs one batch (sequences and head indices → logits per sequence); `write`
/// consumes finished rows in input order (on its own thread); `progress` is called
/// after each batch.
pub fn run<S, R, W>(
    config: SchedulerConfig,
    read: R,
    mut score: impl FnMut(&[Sequence], &[usize]) -> Result<Vec<Vec<f32>>>,
    write: W,
    mut progress: impl FnMut(&PipelineStats),
) -> Result<PipelineStats>
where
    S: Strategy + 'static,
    S::Output: 'static,
    R: FnOnce(Sender<Admission<S>>) -> Result<()> + Send + 'static,
    W: FnOnce(Receiver<Finished<S::Output>>) -> Result<()> + Send + 'static,
{
    let started = Instant::now();
    let (admit_tx, admit_rx) = bounded::<Admission<S>>(config.max_active.max(1));
    let (done_tx, done_rx) = bounded::<Finished<S::Output>>(config.max_active.max(1));
    let reader = std::thread::spawn(move || read(admit_tx));
    let writer = std::thread::spawn(move || write(done_rx));

    let mut stats = PipelineStats::default();
    let result = schedule(
        config,
        &admit_rx,
        &done_tx,
        &mut score,
        &mut stats,
        &mut progress,
    );
    drop(done_tx);
    drop(admit_rx);
    let read_result = reader.join().expect("reader thread panicked");
    let write_result = writer.join().expect("writer thread panicked");
    // The writer's and reader's own errors explain a scheduler send failure best.
    write_result?;
    read_result?;
    result?;
    stats.wall = started.elapsed();
    Ok(stats)
}

fn schedule<S: Strategy>(
    config: SchedulerConfig,
    admit_rx: &Receiver<Admission<S>>,
    done_tx: &Sender<Finished<S::Output>>,
    score: &mut impl FnMut(&[Sequence], &[usize]) -> Result<Vec<Vec<f32>>>,
    stats: &mut PipelineStats,
    progress: &mut impl FnMut(&PipelineStats),
) -> Result<()> {
    let mut slots: Vec<Option<Active<S>>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut queue: Vec<Queued> = Vec::new();
    let mut queued_tokens = 0usize;
    let mut reorder = Reorder::new(done_tx);
    let mut next_row = 0u64;
    let mut reader_done = false;
    loop {
        // Admit until two batches' worth are queued or enough questions are in flight.
        while !reader_done
            && slots.len() - free.len() < config.max_active
            && queued_tokens < 2 * config.max_batch_tokens
        {
            let Ok(admission) = admit_rx.recv() else {
                reader_done = true;
                break;
            };
            let row = next_row;
            next_row += 1;
            stats.rows += 1;
            match admission {
                Admission::Bad(bad) => {
                    stats.bad_rows += 1;
                    reorder.push(row, Finished::Bad(bad))?;
                }
                Admission::Task(mut task) => {
                    let requests = task.requests();
                    if requests.is_empty() {
                        let out = task
                            .take_output()
                            .expect("a search with no requests has finished");
                        reorder.push(row, Finished::Done(out))?;
                        continue;
                    }
                    let slot = free.pop().unwrap_or_else(|| {
                        slots.push(None);
                        slots.len() - 1
                    });
                    let n = requests.len();
                    queued_tokens += enqueue(&mut queue, slot, requests);
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
            if reader_done {
                return Ok(());
            }
            continue;
        }

        // Longest first; take the prefix that fits the token budget.
        queue.sort_by_key(|q| std::cmp::Reverse(q.seq.ids.len()));
        let mut take = 0;
        let mut used = 0;
        while take < queue.len()
            && (take == 0 || used + queue[take].seq.ids.len() <= config.max_batch_tokens)
        {
            used += queue[take].seq.ids.len();
            take += 1;
        }
        let batch: Vec<Queued> = queue.drain(..take).collect();
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
                let mut done = slots[q.slot].take().expect("live slot");
                free.push(q.slot);
                let out = done
                    .task
                    .take_output()
                    .expect("a finished search has an output");
                reorder.push(done.row, Finished::Done(out))?;
            } else {
                let n = requests.len();
                queued_tokens += enqueue(&mut queue, q.slot, requests);
                active.logits = vec![None; n];
                active.outstanding = n;
            }
        }
        progress(stats);
    }
}

/// Queues the requests of one step; returns their token count.
fn enqueue(queue: &mut Vec<Queued>, slot: usize, requests: Vec<(Sequence, usize)>) -> usize {
    let mut tokens = 0;
    for (index, (seq, head)) in requests.into_iter().enumerate() {
        tokens += seq.ids.len();
        queue.push(Queued {
            slot,
            index,
            seq,
            head,
        });
    }
    tokens
}

/// Releases finished rows to the writer in input order.
struct Reorder<'a, O> {
    tx: &'a Sender<Finished<O>>,
    next: u64,
    held: BTreeMap<u64, Finished<O>>,
}

impl<'a, O> Reorder<'a, O> {
    fn new(tx: &'a Sender<Finished<O>>) -> Self {
        Self {
            tx,
            next: 0,
            held: BTreeMap::new(),
        }
    }

    fn push(&mut self, row: u64, item: Finished<O>) -> Result<()> {
        self.held.insert(row, item);
        while let Some(item) = self.held.remove(&self.next) {
            self.tx
                .send(item)
                .map_err(|_| anyhow::anyhow!("the writer stopped early"))?;
            self.next += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn rows_come_out_in_input_order_within_the_token_budget() {
        let budget = 100;
        let mut max_batch = 0;
        let mut mixed_heads = false;
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = out.clone();
        let stats = run(
            SchedulerConfig {
                max_batch_tokens: budget,
                max_active: 4,
            },
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
                    tx.send(item).unwrap();
                }
                Ok(())
            },
            |seqs, heads| {
                max_batch = max_batch.max(seqs.iter().map(|s| s.ids.len()).sum::<usize>());
                mixed_heads |= heads.windows(2).any(|w| w[0] != w[1]);
                Ok(seqs.iter().map(|s| vec![s.ids.len() as f32]).collect())
            },
            move |rx| {
                for item in rx {
                    sink.lock().unwrap().push(match item {
                        Finished::Done((id, sum, _)) => (id, sum),
                        Finished::Bad(b) => (b.row, -1.0),
                    });
                }
                Ok(())
            },
            |_| {},
        )
        .unwrap();
        let out = out.lock().unwrap();
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
