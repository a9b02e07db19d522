//! Host-to-device inputs of the ops (sequence starts, masks, token ids, positions,
//! band tables, RoPE frequencies), uploaded once instead of once per layer.
//!
//! [`Staging::stage`] packs the inputs of one forward pass into a pinned host buffer
//! and copies them to one device buffer in a single transfer; it returns the batch's
//! id, and input `i` of that batch is [`Slot`] `{ batch: id, index: i }`. An op given
//! a slot reads a view into that buffer ([`Staging::resolve`]); an op given no slot
//! (a direct op call, a test) uploads its input itself. Constants (`inv_freq`) stay on
//! the device for the life of the backend, under slots of batch [`CONSTANTS`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, PinnedHostSlice};

use super::memory::{device_err, DeviceBuf, Pool};
use super::profile::Counters;
use crate::backend::{OpError, OpResult, Slot};

/// Byte alignment of each staged input in the device buffer (16-byte vector loads
/// and `cp.async` need 16; 256 keeps every input on its own cache lines).
const ALIGN: usize = 256;
/// The batch id of the constants' slots.
pub const CONSTANTS: u64 = u64::MAX;

/// Byte offsets of inputs of `lens` bytes packed at [`ALIGN`], and the total.
pub fn offsets(lens: impl IntoIterator<Item = usize>) -> (Vec<usize>, usize) {
    let mut total = 0usize;
    let offsets = lens
        .into_iter()
        .map(|len| {
            let at = total;
            total += len.next_multiple_of(ALIGN);
            at
        })
        .collect();
    (offsets, total)
}

/// The staged inputs of one forward pass: the device buffer, and (offset, bytes) of
/// each input.
struct Batch {
    id: u64,
    buf: Arc<DeviceBuf>,
    inputs: Vec<(usize, usize)>,
}

/// The device copy of an op's input: a view into a staged batch or a constant, or a
/// fresh upload. Keeps its storage alive while the op holds it.
pub enum DeviceInput {
    Staged(Arc<DeviceBuf>, usize),
    Owned(DeviceBuf),
}

impl DeviceInput {
    /// The device address (kernel argument).
    pub fn ptr(&self) -> u64 {
        match self {
            DeviceInput::Staged(buf, offset) => buf.ptr() + *offset as u64,
            DeviceInput::Owned(buf) => buf.ptr(),
        }
    }
}

/// Pinned staging memory, the current batch and the constants of one device.
#[derive(Default)]
pub struct Staging {
    /// Pinned host buffer and the event recorded after its last copy was queued.
    pinned: Mutex<Option<(PinnedHostSlice<u8>, Option<CudaEvent>)>>,
    batch: Mutex<Option<Batch>>,
    batches: AtomicU64,
    constants: Mutex<Vec<Arc<DeviceBuf>>>,
}

impl Staging {
    /// Uploads `segments` in one copy through the pinned buffer, into `into` when it
    /// is given (a CUDA graph's fixed input buffer, large enough) or a fresh buffer;
    /// they replace the previously staged batch. Returns the batch id.
    pub fn stage(
        &self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        pool: &Arc<Pool>,
        counts: &Counters,
        segments: &[Vec<u8>],
        into: Option<Arc<DeviceBuf>>,
    ) -> OpResult<u64> {
        let (offsets, total) = offsets(segments.iter().map(Vec::len));
        let buf = match into {
            Some(buf) if buf.bytes() >= total => buf,
            Some(buf) => {
                return Err(device_err(
                    "stage",
                    format!("{total} bytes of inputs for a {}-byte buffer", buf.bytes()),
                ))
            }
            None => Arc::new(pool.alloc(total.max(1))?),
        };
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
                bytes[off..off + s.len()].copy_from_slice(s);
            }
            counts.upload(total);
            // SAFETY: `buf` holds at least `total` bytes; the pinned bytes stay
            // untouched until the event recorded after this copy has completed
            // (checked above).
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
        let id = self.batches.fetch_add(1, Ordering::Relaxed);
        let inputs = offsets
            .into_iter()
            .zip(segments.iter().map(Vec::len))
            .collect();
        *self.batch.lock().unwrap() = Some(Batch { id, buf, inputs });
        Ok(id)
    }

    /// The device copy of `slot`, which `op` reads `bytes` bytes of.
    pub fn resolve(&self, op: &'static str, slot: Slot, bytes: usize) -> OpResult<DeviceInput> {
        let stale = || OpError::Device {
            op,
            msg: format!(
                "input {} of batch {} is not staged (prepare_batch ran again since, or the \
                 slot is of another backend): pass the slots of the current Prepared",
                slot.index, slot.batch
            ),
        };
        let i = slot.index as usize;
        let (buf, offset, len) = if slot.batch == CONSTANTS {
            let constants = self.constants.lock().unwrap();
            let buf = constants.get(i).ok_or_else(stale)?.clone();
            let len = buf.bytes();
            (buf, 0, len)
        } else {
            let batch = self.batch.lock().unwrap();
            let batch = batch
                .as_ref()
                .filter(|b| b.id == slot.batch)
                .ok_or_else(stale)?;
            let &(offset, len) = batch.inputs.get(i).ok_or_else(stale)?;
            (batch.buf.clone(), offset, len)
        };
        if bytes > len {
            return Err(OpError::Device {
                op,
                msg: format!("reads {bytes} bytes of a staged input of {len}"),
            });
        }
        Ok(DeviceInput::Staged(buf, offset))
    }

    /// Keeps `buf` as a constant; its slot.
    pub fn keep(&self, buf: DeviceBuf) -> Slot {
        let mut constants = self.constants.lock().unwrap();
        constants.push(Arc::new(buf));
        Slot {
            batch: CONSTANTS,
            index: (constants.len() - 1) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_packed_at_the_alignment() {
        let (at, total) = offsets([4, 0, 256, 257]);
        assert_eq!(at, vec![0, 256, 256, 512]);
        assert_eq!(total, 1024);
    }
}
