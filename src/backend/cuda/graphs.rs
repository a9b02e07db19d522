//! CUDA graphs of whole forward passes ([`crate::backend::Backend::run_forward`]).
//!
//! A forward is captured once per model and shape of its staged inputs (the model
//! pads its batch to a [`bucket`], so the shape is the bucket's) and replayed for
//! every later batch of that shape: the batch's inputs are staged, in the forward's
//! one upload, into the graph's fixed input buffer, the graph is launched, and the
//! real rows of its output are copied out. Inside a replay nothing is uploaded: a
//! capture in which an op copied host memory fails (a GPU refuses pageable copies
//! while capturing) and that shape runs without a graph from then on.
//!
//! Every buffer allocated while capturing comes from the graph's own [`Arena`], so no
//! other tensor ever aliases memory a replay writes. Profiling (per-kernel events)
//! and `--cuda-graphs off` run forwards without graphs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};

use super::memory::{device_err, Arena, CudaTensor, DeviceBuf};
use super::profile::Recorded;
use super::staging::offsets;
use super::CudaBackend;
use crate::backend::{BatchInputs, BatchShape, Forward, Prepared};

/// Most graphs a backend keeps (each holds the activations of one forward); batches
/// of further shapes, or of any new shape once under a quarter of the device memory
/// is free, run without graphs.
const MAX_GRAPHS: usize = 32;
/// Smallest token bucket.
const MIN_TOKENS: usize = 64;
/// Token buckets per doubling of the batch: padding costs at most 1/8 of the tokens.
const TOKEN_STEPS: usize = 8;

/// The shape a batch of `shape` is padded to: the
/// longest sequence up to a power of two (at least 16, at most `max_len_limit`); one
/// padding sequence of that length when the batch has none (so that every batch of
/// the bucket launches the same grids), then the tokens up to a multiple of 1/8 of
/// their power of two (at least 64), in padding sequences of at most that length;
/// the sequence count up to a power of two.
pub fn bucket(shape: BatchShape, max_len_limit: usize) -> BatchShape {
    let max_len = shape
        .max_len
        .max(1)
        .next_power_of_two()
        .max(16)
        .min(max_len_limit.max(shape.max_len));
    let long_pad = usize::from(shape.max_len < max_len);
    let need = shape.tokens + long_pad * max_len;
    let step = (need.next_power_of_two() / TOKEN_STEPS).max(MIN_TOKENS);
    let tokens = need.next_multiple_of(step);
    let pad_seqs = long_pad + (tokens - need).div_ceil(max_len);
    BatchShape {
        tokens,
        seqs: (shape.seqs + pad_seqs).next_power_of_two(),
        max_len,
    }
}

/// A forward's graph: model key, the longest sequence of each layout (the attention
/// grids; the lengths do not say it without a relative index), and the byte sizes
/// of the inputs it reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GraphKey {
    model: u64,
    max_lens: Vec<usize>,
    lens: Vec<usize>,
}

/// An instantiated graph.
struct Exec(CudaGraph);

// SAFETY: a graph is only launched or destroyed under the cache's mutex (CUDA
// requires calls on one graph object to be serialised, not made from one thread).
unsafe impl Send for Exec {}

/// A captured forward (fields drop in order: the graph before the memory it uses).
struct Captured {
    exec: Exec,
    /// The staged-input buffer the graph reads (capacity for the inputs read after it).
    inputs: Arc<DeviceBuf>,
    output: CudaTensor,
    recorded: Recorded,
    _arena: Arc<Arena>,
}

enum Entry {
    Captured(Box<Captured>),
    /// The capture failed (the reason was printed once); run without a graph.
    Failed,
}

/// The graphs of one backend.
pub struct Graphs {
    enabled: AtomicBool,
    stream: Arc<CudaStream>,
    cache: Mutex<HashMap<GraphKey, Entry>>,
}

impl Graphs {
    /// On until [`Graphs::set_enabled`] says otherwise (`--cuda-graphs`).
    pub fn new(stream: Arc<CudaStream>) -> Self {
        Self {
            enabled: AtomicBool::new(true),
            stream,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }
}

impl Drop for Graphs {
    fn drop(&mut self) {
        // A replay may still run; its arena is freed after the graph.
        let _ = self.stream.synchronize();
    }
}

/// `Backend::run_forward` (`model`: `None` with graphs off or while profiling).
pub fn run(
    be: &CudaBackend,
    model: Option<u64>,
    inputs: &BatchInputs<'_>,
    graph_ids: usize,
    rows: usize,
    forward: &mut Forward<'_, CudaTensor>,
) -> anyhow::Result<(CudaTensor, Prepared)> {
    let dev = &be.dev;
    let segments = &be.segments(inputs);
    // The id lists come last; those from `graph_ids` on are read after the graph.
    let graph_inputs = segments.len() - (inputs.ids.len() - graph_ids);
    let prepared = |batch| super::prepared(inputs, batch);
    let Some(model) = model else {
        return eager(be, prepared(dev.stage(segments, None)?), rows, forward);
    };
    let key = GraphKey {
        model,
        max_lens: inputs.layouts.iter().map(|l| l.max_len()).collect(),
        lens: segments[..graph_inputs].iter().map(Vec::len).collect(),
    };
    let (_, graph_bytes) = offsets(key.lens.iter().copied());
    let (_, total) = offsets(segments.iter().map(Vec::len));
    let mut cache = be.graphs.cache.lock().unwrap();
    let mut staged = None;
    if !cache.contains_key(&key) && cache.len() < MAX_GRAPHS && room_for_a_graph() {
        // Room for the inputs read after the graph: as many bytes again as the graph's.
        let inputs = Arc::new(dev.pool.alloc(total.max(2 * graph_bytes))?);
        let p = prepared(dev.stage(segments, Some(inputs.clone()))?);
        let entry = match capture(be, &mut || forward(&p)) {
            Ok((graph, output, recorded, arena)) => Entry::Captured(Box::new(Captured {
                exec: Exec(graph),
                inputs,
                output,
                recorded,
                _arena: arena,
            })),
            // The forward's own error (a bad batch): no graph, and the next batch of
            // this shape tries again.
            Err(Capture::Forward(e)) => return Err(e),
            Err(Capture::Graph(e)) => {
                log::warn!(
                    "capturing a CUDA graph failed ({e:#}); batches of this shape \
                     run without one (--cuda-graphs off turns graphs off)"
                );
                Entry::Failed
            }
        };
        cache.insert(key.clone(), entry);
        staged = Some(p);
    }
    match cache.get(&key) {
        Some(Entry::Captured(c)) if c.inputs.bytes() >= total => {
            let p = match staged {
                Some(p) => p,
                None => prepared(dev.stage(segments, Some(c.inputs.clone()))?),
            };
            c.exec
                .0
                .launch()
                .map_err(|e| device_err("graph launch", e))?;
            dev.counts.replay(&c.recorded);
            Ok((be.first_rows(&c.output, rows)?, p))
        }
        _ => {
            drop(cache);
            let p = match staged {
                Some(p) => p,
                None => prepared(dev.stage(segments, None)?),
            };
            eager(be, p, rows, forward)
        }
    }
}

/// Whether a quarter of the device memory is still free: a graph keeps the
/// activations of its forward, so more of them could starve the forwards without one.
fn room_for_a_graph() -> bool {
    cudarc::driver::result::mem_get_info().is_ok_and(|(free, total)| free * 4 >= total)
}

/// Runs `forward` with staged slots `p` without a graph.
fn eager(
    be: &CudaBackend,
    p: Prepared,
    rows: usize,
    forward: &mut Forward<'_, CudaTensor>,
) -> anyhow::Result<(CudaTensor, Prepared)> {
    let out = forward(&p)?;
    let out = match out.rows == rows {
        true => out,
        false => be.first_rows(&out, rows)?,
    };
    Ok((out, p))
}

/// Why a capture produced no graph.
enum Capture {
    /// The forward failed (as it would without a graph).
    Forward(anyhow::Error),
    /// Capturing or instantiating failed.
    Graph(anyhow::Error),
}

/// Captures `forward` into a graph whose buffers come from a new arena: the graph,
/// its output, what it runs per replay, and the arena.
fn capture(
    be: &CudaBackend,
    forward: &mut dyn FnMut() -> anyhow::Result<CudaTensor>,
) -> Result<(CudaGraph, CudaTensor, Recorded, Arc<Arena>), Capture> {
    let dev = &be.dev;
    let graph_err = |e: String| Capture::Graph(anyhow::anyhow!("{e}"));
    // Relaxed: loading a kernel module or allocating an arena buffer (`cuMemAlloc`)
    // on the first capture is allowed.
    dev.stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(|e| graph_err(e.to_string()))?;
    let arena = Arc::new(Arena::default());
    dev.pool.begin_arena(arena.clone());
    dev.counts.begin_recording();
    let out = forward();
    let recorded = dev.counts.end_recording();
    dev.pool.end_arena();
    let graph = dev.stream.end_capture(CUgraphInstantiate_flags(0));
    if recorded.host_copies > 0 {
        return Err(graph_err(format!(
            "{} host copies were queued while capturing (an op was given an input \
             without its slot)",
            recorded.host_copies
        )));
    }
    let graph = graph.map_err(|e| graph_err(e.to_string()))?;
    let out = out.map_err(Capture::Forward)?;
    let graph = graph.ok_or_else(|| graph_err("the forward queued no work".into()))?;
    dev.counts.captured();
    Ok((graph, out, recorded, arena))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(tokens: usize, seqs: usize, max_len: usize) -> BatchShape {
        BatchShape {
            tokens,
            seqs,
            max_len,
        }
    }

    #[test]
    fn buckets_hold_the_batch_and_its_padding() {
        // 3 sequences up to 40 tokens, 100 in all: 64-token padding sequence, then
        // 164 → 192 tokens (step 32), one more sequence of 28; 5 → 8 sequences.
        assert_eq!(bucket(shape(100, 3, 40), 512), shape(192, 8, 64));
        // A batch with a sequence of the bucket's length needs no long padding.
        assert_eq!(bucket(shape(100, 3, 64), 512), shape(128, 4, 64));
        // The limit caps the length (a model's position table).
        assert_eq!(bucket(shape(300, 1, 300), 400), shape(768, 4, 400));
        // Every bucket is its own bucket (a padded batch captures one graph).
        for s in [shape(100, 3, 40), shape(7, 2, 5), shape(5000, 20, 512)] {
            let b = bucket(s, 512);
            assert!(b.tokens >= s.tokens && b.seqs >= s.seqs && b.max_len >= s.max_len);
            assert_eq!(bucket(b, 512), b, "{s:?}");
        }
    }
}
