//! Host-to-device inputs of the ops (sequence starts, masks, token ids, positions,
//! band tables, RoPE frequencies), uploaded once instead of once per layer.
//!
//! [`Staging::stage`] packs the inputs of one forward pass into a pinned host buffer
//! and copies them to one device buffer in a single transfer; an op then asks for its
//! input by content ([`Staging::input`]) and gets a view into that buffer, or, for an
//! input that was not staged (a direct op call, a test), its own upload. Constants
//! (`inv_freq`) stay on the device for the life of the backend.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, PinnedHostSlice};

use super::memory::{device_err, DeviceBuf, Pool};
use super::profile::Counters;
use crate::backend::OpResult;

/// Byte alignment of each staged input in the device buffer (16-byte vector loads
/// and `cp.async` need 16; 256 keeps every input on its own cache lines).
const ALIGN: usize = 256;
/// Most distinct constants kept on the device (RoPE tables of a few models).
const MAX_CONSTANTS: usize = 32;

/// One input of a forward pass: `data` is what the kernels read; `key` is what an op
/// asks for (the data itself, or for derived tables such as the band table, the
/// inputs they are derived from), under `kind`.
pub struct Segment {
    pub kind: &'static str,
    pub key: Vec<u8>,
    pub data: Vec<u8>,
}

impl Segment {
    /// An input that is looked up by its own bytes.
    pub fn plain(data: Vec<u8>) -> Self {
        Self {
            kind: "",
            key: data.clone(),
            data,
        }
    }
}

/// The staged inputs of the current forward pass.
pub struct Batch {
    buf: DeviceBuf,
    /// (kind, key, byte offset in `buf`).
    entries: Vec<(&'static str, Vec<u8>, usize)>,
}

/// The device copy of an op's input: a view into the staged batch or a constant, or
/// a fresh upload. Keeps its storage alive while the op holds it.
pub enum Input {
    Staged(Arc<Batch>, usize),
    Constant(Arc<DeviceBuf>),
    Owned(DeviceBuf),
}

impl Input {
    /// The device address (kernel argument).
    pub fn ptr(&self) -> u64 {
        match self {
            Input::Staged(batch, offset) => batch.buf.ptr() + *offset as u64,
            Input::Constant(buf) => buf.ptr(),
            Input::Owned(buf) => buf.ptr(),
        }
    }
}

/// Pinned staging memory, the current batch and the constants of one device.
#[derive(Default)]
pub struct Staging {
    /// Pinned host buffer and the event recorded after its last copy was queued.
    pinned: Mutex<Option<(PinnedHostSlice<u8>, Option<CudaEvent>)>>,
    batch: Mutex<Option<Arc<Batch>>>,
    constants: Mutex<Vec<(Vec<u8>, Arc<DeviceBuf>)>>,
}

impl Staging {
    /// Uploads `segments` in one copy through the pinned buffer; they replace the
    /// previously staged batch.
    pub fn stage(
        &self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        pool: &Arc<Pool>,
        counts: &Counters,
        segments: Vec<Segment>,
    ) -> OpResult<()> {
        let mut offsets = Vec::with_capacity(segments.len());
        let mut total = 0usize;
        for s in &segments {
            offsets.push(total);
            total += s.data.len().next_multiple_of(ALIGN);
        }
        let buf = pool.alloc(total.max(1))?;
        if total > 0 {
            let mut pinned = self.pinned.lock().unwrap();
            if pinned.as_ref().is_none_or(|(p, _)| p.len() < total) {
                // Dropping the old buffer waits for its last copy.
                *pinned = None;
                // SAFETY: the contents are written below before they are copied.
                let p = unsafe { ctx.alloc_pinned::<u8>(total.next_power_of_two()) }
                    .map_err(|e| device_err("stage", format!("pinned host buffer: {e}")))?;
                *pinned = Some((p, None));
            }
            let (host, last_copy) = pinned.as_mut().expect("allocated above");
            // The previous batch's copy must be done before its bytes are overwritten.
            if let Some(ev) = last_copy.take() {
                ev.synchronize().map_err(|e| device_err("stage", e))?;
            }
            let bytes = host.as_mut_slice().map_err(|e| device_err("stage", e))?;
            for (s, &off) in segments.iter().zip(&offsets) {
                bytes[off..off + s.data.len()].copy_from_slice(&s.data);
            }
            counts.upload(total);
            // SAFETY: `buf` holds `total` bytes; the pinned bytes stay untouched until
            // the event recorded after this copy has completed (checked above).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    buf.ptr(),
                    &bytes[..total],
                    stream.cu_stream(),
                )
            }
            .map_err(|e| device_err("stage", e))?;
            let ev = ctx.new_event(None).map_err(|e| device_err("stage", e))?;
            ev.record(stream).map_err(|e| device_err("stage", e))?;
            *last_copy = Some(ev);
        }
        let entries = segments
            .into_iter()
            .zip(offsets)
            .map(|(s, off)| (s.kind, s.key, off))
            .collect();
        *self.batch.lock().unwrap() = Some(Arc::new(Batch { buf, entries }));
        Ok(())
    }

    /// The staged input of `kind` with `key`, if the current batch has it.
    pub fn find(&self, kind: &str, key: &[u8]) -> Option<Input> {
        let batch = self.batch.lock().unwrap().clone()?;
        let offset = batch
            .entries
            .iter()
            .find(|(k, bytes, _)| *k == kind && bytes == key)
            .map(|e| e.2)?;
        Some(Input::Staged(batch, offset))
    }

    /// The constant with bytes `data`, uploaded by `upload` the first time.
    pub fn constant(
        &self,
        data: &[u8],
        upload: impl FnOnce(&[u8]) -> OpResult<DeviceBuf>,
    ) -> OpResult<Input> {
        let mut constants = self.constants.lock().unwrap();
        if let Some((_, buf)) = constants.iter().find(|(d, _)| d == data) {
            return Ok(Input::Constant(buf.clone()));
        }
        let buf = Arc::new(upload(data)?);
        if constants.len() < MAX_CONSTANTS {
            constants.push((data.to_vec(), buf.clone()));
        }
        Ok(Input::Constant(buf))
    }
}
