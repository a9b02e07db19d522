//! Per-kernel device time with CUDA events (`hopscore bench`'s time split), and the
//! counts of launches and copies (`hopscore bench --profile`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::driver::CudaEvent;

use super::device::Device;
use super::memory::device_err;
use crate::backend::{DeviceCounts, KernelTime, OpResult};

/// Running totals of the work a device has queued (always on: a few atomic adds).
#[derive(Default)]
pub struct Counters {
    launches: AtomicU64,
    gemms: AtomicU64,
    uploads: AtomicU64,
    upload_bytes: AtomicU64,
    downloads: AtomicU64,
    download_bytes: AtomicU64,
    device_copies: AtomicU64,
}

impl Counters {
    pub fn launch(&self) {
        self.launches.fetch_add(1, Ordering::Relaxed);
    }

    pub fn gemm(&self) {
        self.gemms.fetch_add(1, Ordering::Relaxed);
    }

    pub fn upload(&self, bytes: usize) {
        self.uploads.fetch_add(1, Ordering::Relaxed);
        self.upload_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn download(&self, bytes: usize) {
        self.downloads.fetch_add(1, Ordering::Relaxed);
        self.download_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn device_copy(&self) {
        self.device_copies.fetch_add(1, Ordering::Relaxed);
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

    fn active(&self) -> bool {
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
            let Ok(end) = dev.ctx.new_event(None) else {
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
