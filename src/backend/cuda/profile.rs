//! Per-kernel device time with CUDA events (`hopscore bench`'s time split), and the
//! counts of launches and copies (`hopscore bench --profile`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::driver::CudaEvent;

use super::device::Device;
use super::memory::device_err;
use crate::backend::{DeviceCounts, KernelTime, OpResult};

/// Running totals of the work a device has queued (always on: a few atomic adds).
/// While a CUDA graph is captured, launches, GEMMs and copies are counted as the
/// graph's ([`Counters::begin_recording`]); each replay adds them to the graph totals.
#[derive(Default)]
pub struct Counters {
    launches: AtomicU64,
    gemms: AtomicU64,
    uploads: AtomicU64,
    upload_bytes: AtomicU64,
    downloads: AtomicU64,
    download_bytes: AtomicU64,
    device_copies: AtomicU64,
    captures: AtomicU64,
    replays: AtomicU64,
    graph_launches: AtomicU64,
    graph_gemms: AtomicU64,
    recording: AtomicBool,
    /// Launches, GEMMs and host copies recorded into the graph being captured.
    recorded: [AtomicU64; 3],
}

/// What one captured graph runs per replay.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recorded {
    pub launches: u64,
    pub gemms: u64,
    /// Host copies recorded (a capture with any fails: a replay makes none).
    pub host_copies: u64,
}

impl Counters {
    /// Adds 1 to `live`, or to recorded counter `i` while recording.
    fn count(&self, live: &AtomicU64, i: usize) -> bool {
        let recording = self.recording.load(Ordering::Relaxed);
        let c = if recording { &self.recorded[i] } else { live };
        c.fetch_add(1, Ordering::Relaxed);
        !recording
    }

    pub fn launch(&self) {
        self.count(&self.launches, 0);
    }

    pub fn gemm(&self) {
        self.count(&self.gemms, 1);
    }

    pub fn upload(&self, bytes: usize) {
        if self.count(&self.uploads, 2) {
            self.upload_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }

    /// Counts what follows as the captured graph's, until [`Counters::end_recording`].
    pub fn begin_recording(&self) {
        for r in &self.recorded {
            r.store(0, Ordering::Relaxed);
        }
        self.recording.store(true, Ordering::Relaxed);
    }

    pub fn end_recording(&self) -> Recorded {
        self.recording.store(false, Ordering::Relaxed);
        let [launches, gemms, host_copies] =
            self.recorded.each_ref().map(|r| r.load(Ordering::Relaxed));
        Recorded {
            launches,
            gemms,
            host_copies,
        }
    }

    /// A graph was captured.
    pub fn captured(&self) {
        self.captures.fetch_add(1, Ordering::Relaxed);
    }

    /// One launch of a graph that runs `r`.
    pub fn replay(&self, r: &Recorded) {
        self.replays.fetch_add(1, Ordering::Relaxed);
        self.graph_launches.fetch_add(r.launches, Ordering::Relaxed);
        self.graph_gemms.fetch_add(r.gemms, Ordering::Relaxed);
    }

    pub fn download(&self, bytes: usize) {
        if self.count(&self.downloads, 2) {
            self.download_bytes
                .fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }

    /// A device-to-device copy (inside a graph: counted with its launches).
    pub fn device_copy(&self) {
        self.count(&self.device_copies, 0);
    }

    pub fn snapshot(&self) -> DeviceCounts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DeviceCounts {
            launches: get(&self.launches),
            gemms: get(&self.gemms),
            uploads: get(&self.uploads),
            upload_bytes: get(&self.upload_bytes),
            downloads: get(&self.downloads),
            download_bytes: get(&self.download_bytes),
            device_copies: get(&self.device_copies),
            captures: get(&self.captures),
            replays: get(&self.replays),
            graph_launches: get(&self.graph_launches),
            graph_gemms: get(&self.graph_gemms),
        }
    }
}

/// Records (name, start, end) events around launches while active.
#[derive(Default)]
pub struct Profiler {
    spans: Mutex<Option<Vec<(String, CudaEvent, CudaEvent)>>>,
}

/// Records the end event of a span when dropped.
pub struct Span<'a> {
    owner: Option<(&'a Profiler, &'a Device, String, CudaEvent)>,
}

impl Profiler {
    pub fn start(&self) {
        *self.spans.lock().unwrap() = Some(Vec::new());
    }

    /// Whether kernels are being timed.
    pub fn active(&self) -> bool {
        self.spans.lock().unwrap().is_some()
    }

    /// Starts a span named `name` if profiling; the span ends when the guard drops.
    pub fn time<'a>(&'a self, dev: &'a Device, name: &str) -> OpResult<Span<'a>> {
        if !self.active() {
            return Ok(Span { owner: None });
        }
        let start = dev.timer()?.into_start();
        Ok(Span {
            owner: Some((self, dev, name.to_string(), start)),
        })
    }

    /// Sums the recorded spans per name (after the stream is synchronised).
    pub fn finish(&self) -> OpResult<Vec<KernelTime>> {
        let spans = self.spans.lock().unwrap().take().unwrap_or_default();
        let mut by_name: HashMap<String, (usize, f64)> = HashMap::new();
        for (name, start, end) in spans {
            let ms = start
                .elapsed_ms(&end)
                .map_err(|e| device_err("profile", e))?;
            let e = by_name.entry(name).or_default();
            e.0 += 1;
            e.1 += f64::from(ms);
        }
        let mut out: Vec<KernelTime> = by_name
            .into_iter()
            .map(|(kernel, (calls, ms))| KernelTime { kernel, calls, ms })
            .collect();
        out.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        Ok(out)
    }
}

impl Drop for Span<'_> {
    fn drop(&mut self) {
        if let Some((profiler, dev, name, start)) = self.owner.take() {
            let Ok(end) = dev.timing_event() else {
                return;
            };
            if end.record(&dev.stream).is_ok() {
                if let Some(spans) = profiler.spans.lock().unwrap().as_mut() {
                    spans.push((name, start, end));
                }
            }
        }
    }
}
