//! Device memory: element types, a caching allocator for activations (with the
//! arenas CUDA graphs own), and the device matrix type of the CUDA backend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{result as drv, sys, CudaSlice, CudaStream, DevicePtr, DriverError};

use crate::backend::check::Dims;
use crate::backend::dtype::DType;
use crate::backend::{OpError, OpResult};

/// Size class of an allocation: 512-byte steps up to 1 MiB, then 1 MiB steps, so
/// that the activations of similar batches reuse each other's buffers.
fn size_class(bytes: usize) -> usize {
    const SMALL: usize = 512;
    const LARGE: usize = 1 << 20;
    let step = if bytes <= LARGE { SMALL } else { LARGE };
    bytes.max(1).div_ceil(step) * step
}

/// A caching allocator on one stream: freed buffers go to a free list per size
/// class and are handed out again without a driver call. On out-of-memory the cache
/// is released and the allocation retried once.
pub struct Pool {
    stream: Arc<CudaStream>,
    free: Mutex<HashMap<usize, Vec<CudaSlice<u8>>>>,
    /// The arena of the graph being captured: every allocation comes from it.
    arena: Mutex<Option<Arc<Arena>>>,
    /// Fill every buffer handed out with 0xFF bytes (NaN in f32/bf16/f16), so that a
    /// kernel that leaves an output element unwritten fails its parity test.
    poison: bool,
}

impl Pool {
    pub fn new(stream: Arc<CudaStream>, poison: bool) -> Arc<Self> {
        Arc::new(Self {
            stream,
            free: Mutex::new(HashMap::new()),
            arena: Mutex::new(None),
            poison,
        })
    }

    /// Bytes held in the free lists.
    pub fn cached_bytes(&self) -> usize {
        let free = self.free.lock().unwrap();
        free.iter().map(|(class, v)| class * v.len()).sum()
    }

    fn release_cache(&self) {
        self.free.lock().unwrap().clear();
    }

    /// A buffer of at least `bytes` bytes (contents undefined unless poisoning).
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> OpResult<DeviceBuf> {
        let class = size_class(bytes);
        let arena = self.arena.lock().unwrap().clone();
        let storage = match arena {
            Some(arena) => Storage::Arena(arena.alloc(class)?, class, arena),
            None => {
                let reused = self.free.lock().unwrap().get_mut(&class).and_then(Vec::pop);
                match reused {
                    Some(s) => Storage::Pooled(s),
                    None => Storage::Pooled(self.fresh(class)?),
                }
            }
        };
        let buf = DeviceBuf {
            storage: Some(storage),
            bytes,
            pool: self.clone(),
        };
        if self.poison {
            // SAFETY: the pointer covers `bytes` bytes of a live allocation on this stream.
            unsafe { drv::memset_d8_async(buf.ptr(), 0xFF, bytes, self.stream.cu_stream()) }
                .map_err(|e| device_err("alloc", e))?;
        }
        Ok(buf)
    }

    fn fresh(&self, class: usize) -> OpResult<CudaSlice<u8>> {
        // SAFETY: the contents are uninitialised; every op writes its outputs.
        match unsafe { self.stream.alloc::<u8>(class) } {
            Ok(s) => Ok(s),
            Err(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => {
                let cached = self.cached_bytes();
                self.release_cache();
                // SAFETY: as above.
                unsafe { self.stream.alloc::<u8>(class) }.map_err(|_| {
                    let free = drv::mem_get_info().map(|(f, _)| f).unwrap_or(0);
                    OpError::Device {
                        op: "alloc",
                        msg: format!(
                            "out of GPU memory allocating {} MiB ({} MiB were cached and \
                             released, {} MiB free): lower --batch-tokens or use a smaller \
                             --dtype",
                            class >> 20,
                            cached >> 20,
                            free >> 20
                        ),
                    }
                })
            }
            Err(e) => Err(device_err("alloc", e)),
        }
    }

    /// Allocates from `arena` until [`Pool::end_arena`] (a graph capture).
    pub fn begin_arena(&self, arena: Arc<Arena>) {
        *self.arena.lock().unwrap() = Some(arena);
    }

    pub fn end_arena(&self) {
        *self.arena.lock().unwrap() = None;
    }

    fn give_back(&self, slice: CudaSlice<u8>) {
        let class = slice.len();
        self.free
            .lock()
            .unwrap()
            .entry(class)
            .or_default()
            .push(slice);
    }
}

/// Maps a driver error of op `op` to an [`OpError`].
pub fn device_err(op: &'static str, e: impl std::fmt::Display) -> OpError {
    OpError::Device {
        op,
        msg: e.to_string(),
    }
}

/// Device memory owned by one CUDA graph: the buffers allocated while it was
/// captured (their addresses are baked into it). They are reused only by that
/// capture and freed with the arena, after the graph. Allocated with `cuMemAlloc`,
/// not stream-ordered, so that the capture records no allocation nodes.
#[derive(Default)]
pub struct Arena {
    free: Mutex<HashMap<usize, Vec<u64>>>,
    owned: Mutex<Vec<u64>>,
}

impl Arena {
    fn alloc(&self, class: usize) -> OpResult<u64> {
        if let Some(p) = self.free.lock().unwrap().get_mut(&class).and_then(Vec::pop) {
            return Ok(p);
        }
        // SAFETY: a plain device allocation, freed in `Drop`.
        let p = unsafe { drv::malloc_sync(class) }.map_err(|e| {
            device_err(
                "alloc",
                format!("{e} allocating {} KiB for a CUDA graph", class >> 10),
            )
        })?;
        self.owned.lock().unwrap().push(p);
        Ok(p)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for &p in self.owned.get_mut().unwrap().iter() {
            // SAFETY: allocated by `malloc_sync`; the graph using it is gone and its
            // last replay has completed (the graph cache synchronises first).
            let _ = unsafe { drv::free_sync(p) };
        }
    }
}

/// Where a buffer's memory comes from: the pool, or an arena (address, size class).
enum Storage {
    Pooled(CudaSlice<u8>),
    Arena(u64, usize, Arc<Arena>),
}

/// Pooled device bytes; returned to the pool's free list (or its arena's) on drop.
pub struct DeviceBuf {
    storage: Option<Storage>,
    bytes: usize,
    pool: Arc<Pool>,
}

impl DeviceBuf {
    /// The device address (kernel argument).
    pub fn ptr(&self) -> u64 {
        match self.storage.as_ref().expect("live buffer") {
            Storage::Pooled(s) => {
                // Event tracking is off (one stream), so the guard records nothing.
                let (ptr, _guard) = s.device_ptr(&self.pool.stream);
                ptr
            }
            Storage::Arena(p, _, _) => *p,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        match self.storage.take() {
            Some(Storage::Pooled(s)) => self.pool.give_back(s),
            Some(Storage::Arena(p, class, arena)) => {
                arena.free.lock().unwrap().entry(class).or_default().push(p);
            }
            None => {}
        }
    }
}

/// A row-major device matrix `[rows, cols]` of `dtype` elements, at `offset` bytes
/// into a buffer it may share with the other outputs of one GEMM (disjoint parts).
pub struct CudaTensor {
    buf: Arc<DeviceBuf>,
    offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub dtype: DType,
}

impl CudaTensor {
    /// A matrix that owns `buf`.
    pub fn new(buf: DeviceBuf, rows: usize, cols: usize, dtype: DType) -> Self {
        Self {
            buf: Arc::new(buf),
            offset: 0,
            rows,
            cols,
            dtype,
        }
    }

    /// `parts` matrices `[rows, cols]` stored back to back in `buf`.
    pub fn split(
        buf: DeviceBuf,
        parts: usize,
        rows: usize,
        cols: usize,
        dtype: DType,
    ) -> Vec<Self> {
        let buf = Arc::new(buf);
        (0..parts)
            .map(|p| Self {
                buf: buf.clone(),
                offset: p * rows * cols * dtype.size(),
                rows,
                cols,
                dtype,
            })
            .collect()
    }

    /// The device address of element 0.
    pub fn ptr(&self) -> u64 {
        self.buf.ptr() + self.offset as u64
    }

    /// Bytes of the matrix.
    pub fn bytes(&self) -> usize {
        self.rows * self.cols * self.dtype.size()
    }
}

impl Dims for CudaTensor {
    fn dims(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
}

/// The operands a kernel stages by 16-byte `cp.async` must start 16-byte aligned (a GPU
/// faults otherwise): a clear error naming the operand instead.
pub(super) fn require_16_byte_aligned(op: &'static str, operands: &[(&str, u64)]) -> OpResult<()> {
    match operands.iter().find(|(_, ptr)| ptr % 16 != 0) {
        None => Ok(()),
        Some((name, ptr)) => Err(OpError::Shape {
            op,
            msg: format!(
                "{name} starts at {ptr:#x}, not 16-byte aligned: the bf16/f16 kernel stages rows by \
                 16-byte copies; pass a tensor that starts on a 16-byte boundary (a split of a \
                 fused projection at a multiple of 8 columns)"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up() {
        assert_eq!(size_class(0), 512);
        assert_eq!(size_class(513), 1024);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), 2 << 20);
    }

    #[test]
    fn a_misaligned_operand_is_named_not_launched() {
        assert!(require_16_byte_aligned("op", &[("q", 0x1000), ("k", 0), ("v", 0x20)]).is_ok());
        let err = require_16_byte_aligned("op", &[("q", 0x1000), ("k", 0x1008)]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("k starts at 0x1008, not 16-byte aligned"),
            "{msg}"
        );
    }
}
