//! One CUDA device: context, its own non-blocking stream, cuBLASLt handle, the kernel
//! modules (fatbins), the staged op inputs and the upload/launch helpers. Opening it never panics, even without a driver.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{bail, Context, Result};
use cudarc::driver::sys::{self, CUevent_flags, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, LaunchConfig};

use super::blas::Lt;
use super::memory::{device_err, DeviceBuf, Pool};
use super::module_load;
use super::profile::Counters;
use super::staging::{DeviceInput, Staging};
use crate::backend::dtype::DType;
use crate::backend::gpu_kernels::KernelSet;
use crate::backend::provenance;
use crate::backend::{kernels, Input, OpError, OpResult, SeqLayout, Slot};

/// An opened device with its stream, allocator and loaded kernels.
pub struct Device {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub lt: Lt,
    pub pool: Arc<Pool>,
    pub dtype: DType,
    /// Launches and copies queued on `stream`.
    pub counts: Counters,
    staging: Staging,
    name: String,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    /// Dynamic shared memory each kernel has been opted in to, by entry name.
    smem_opt_in: Mutex<HashMap<String, u32>>,
    /// The device's multiprocessor count, asked of the driver once.
    multiprocessors: OnceLock<i32>,
    /// Its compute capability (major, minor), asked once.
    compute_capability: OnceLock<(i32, i32)>,
    /// How many clusters of each clustered kernel (its op name; the entry is that op's
    /// of this device's dtype) run at once.
    active_clusters: Mutex<HashMap<&'static str, i32>>,
    /// The kernel set the job asked for: how loudly a kernel without a hardware record
    /// is announced when first loaded ([`Device::function`]).
    kernel_set: KernelSet,
}

/// Dynamic shared memory a kernel gets without opting in (bytes).
pub const DEFAULT_SMEM: u32 = 48 * 1024;

/// The launch attribute asking for clusters of `cluster` CTAs.
fn cluster_attribute(cluster: (u32, u32, u32)) -> sys::CUlaunchAttribute {
    sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        pad: [0; 4],
        value: sys::CUlaunchAttributeValue {
            clusterDim: sys::CUlaunchAttributeValue_union__bindgen_ty_1 {
                x: cluster.0,
                y: cluster.1,
                z: cluster.2,
            },
        },
    }
}

/// `cfg` on `stream` with the one attribute `attr`.
fn launch_config(
    cfg: LaunchConfig,
    stream: &CudaStream,
    attr: &mut sys::CUlaunchAttribute,
) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: attr,
        numAttrs: 1,
    }
}

/// Number of CUDA devices, or a clear error when no driver or device can be used.
/// What identifies device `ordinal` to the self-test's cache: its name, compute
/// capability and the driver version (`cuDriverGetVersion`), asked of a context
/// opened for the purpose.
pub fn identity(ordinal: usize) -> Result<(String, (i32, i32), Option<i32>)> {
    let count = device_count()?;
    if ordinal >= count {
        bail!("CUDA device {ordinal} requested but only {count} present");
    }
    let ctx = CudaContext::new(ordinal)
        .with_context(|| format!("cannot create a CUDA context on device {ordinal}"))?;
    let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
    let cc = ctx.compute_capability()?;
    Ok((name, cc, module_load::driver_version()))
}

pub fn device_count() -> Result<usize> {
    // SAFETY: `is_culib_present` only tries to dlopen libcuda; it calls nothing in it.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        bail!("no CUDA driver (libcuda.so) found: install the NVIDIA driver or use --device cpu");
    }
    let count = CudaContext::device_count()
        .map_err(|e| anyhow::anyhow!("the CUDA driver failed to start ({e}): use --device cpu"))?;
    if count < 1 {
        bail!("the CUDA driver reports no device: use --device cpu");
    }
    Ok(count as usize)
}

impl Device {
    /// Opens device `ordinal`; `poison` fills fresh buffers with NaN bytes (tests);
    /// `kernel_set`: the job's `--gpu-kernels`.
    pub fn open(ordinal: usize, dtype: DType, poison: bool, kernel_set: KernelSet) -> Result<Self> {
        let count = device_count()?;
        if ordinal >= count {
            bail!("CUDA device {ordinal} requested but only {count} present");
        }
        if kernels::MODULES.is_empty() {
            bail!(
                "this hopscore binary was built without its CUDA kernels (nvcc was not found \
                 at build time): rebuild with NVCC=/path/to/nvcc, or use --device cpu"
            );
        }
        let ctx = CudaContext::new(ordinal)
            .with_context(|| format!("cannot create a CUDA context on device {ordinal}"))?;
        // One stream per device: cross-stream event tracking would only add overhead.
        // SAFETY: called before any allocation or stream exists on this context.
        unsafe { ctx.disable_event_tracking() };
        // Non-blocking: no implicit synchronisation with the legacy NULL stream.
        let stream = ctx.new_stream().context("cannot create a CUDA stream")?;
        // SAFETY: `is_culib_present` only tries to dlopen libcublasLt; it calls nothing in it.
        if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
            bail!(
                "cuBLASLt (libcublasLt.so.13) not found: install the CUDA 13 toolkit libraries \
                 (`pip install hopscore[cuda]` for the Python package) or add their directory \
                 to LD_LIBRARY_PATH, or use --device cpu"
            );
        }
        let pool = Pool::new(stream.clone(), poison);
        let lt = Lt::new(&pool)?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        Ok(Self {
            pool,
            ctx,
            stream,
            lt,
            dtype,
            counts: Counters::default(),
            staging: Staging::default(),
            name,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            smem_opt_in: Mutex::new(HashMap::new()),
            multiprocessors: OnceLock::new(),
            compute_capability: OnceLock::new(),
            active_clusters: Mutex::new(HashMap::new()),
            kernel_set,
        })
    }

    /// The device's multiprocessor count (asked of the driver on the first call).
    pub fn multiprocessors(&self, op: &'static str) -> OpResult<i32> {
        if let Some(&n) = self.multiprocessors.get() {
            return Ok(n);
        }
        let n = self
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| device_err(op, e))?;
        Ok(*self.multiprocessors.get_or_init(|| n))
    }

    /// The compute capability (major, minor), asked of the driver once.
    pub fn compute_capability(&self, op: &'static str) -> OpResult<(i32, i32)> {
        if let Some(&cc) = self.compute_capability.get() {
            return Ok(cc);
        }
        let cc = self
            .ctx
            .compute_capability()
            .map_err(|e| device_err(op, e))?;
        Ok(*self.compute_capability.get_or_init(|| cc))
    }

    /// [`Self::max_active_clusters`] of kernel `op`, where it has been asked.
    pub fn known_active_clusters(&self, op: &'static str) -> Option<i32> {
        self.active_clusters.lock().unwrap().get(op).copied()
    }

    /// How many `cluster`-CTA clusters of `f` (kernel `op` in this device's dtype,
    /// launched with `cfg`'s block and shared memory) the device runs at once, asked of
    /// the driver once.
    pub fn max_active_clusters(
        &self,
        op: &'static str,
        f: &CudaFunction,
        cfg: LaunchConfig,
        cluster: (u32, u32, u32),
    ) -> OpResult<i32> {
        if let Some(n) = self.known_active_clusters(op) {
            return Ok(n);
        }
        let entry = format!("{op}_{}", self.dtype.suffix());
        let mut attr = cluster_attribute(cluster);
        let config = launch_config(cfg, &self.stream, &mut attr);
        let mut n = 0;
        // SAFETY: `config` points at `attr`, alive for the call; `f` is a loaded kernel.
        unsafe {
            cudarc::driver::sys::cuOccupancyMaxActiveClusters(&mut n, f.cu_function(), &config)
        }
        .result()
        .map_err(|e| device_err(op, format!("`{entry}` in clusters of {cluster:?}: {e}")))?;
        if n < 1 {
            return Err(device_err(
                op,
                format!("`{entry}` in clusters of {cluster:?} cannot run on this device (no cluster fits)"),
            ));
        }
        self.active_clusters.lock().unwrap().insert(op, n);
        Ok(n)
    }

    /// Launches `f` on the stream in clusters of `cluster` CTAs (`cuLaunchKernelEx`;
    /// cudarc 0.19 has no cluster launch).
    ///
    /// # Safety
    /// `args` points at the kernel's parameters, each alive for the call, in its order.
    pub unsafe fn launch_cluster(
        &self,
        f: &CudaFunction,
        cfg: LaunchConfig,
        cluster: (u32, u32, u32),
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<(), cudarc::driver::DriverError> {
        self.ctx.bind_to_thread()?;
        let mut attr = cluster_attribute(cluster);
        let config = launch_config(cfg, &self.stream, &mut attr);
        // SAFETY: the caller's contract; `config` points at `attr`, alive for the call.
        unsafe {
            cudarc::driver::sys::cuLaunchKernelEx(
                &config,
                f.cu_function(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel named `entry`, loading the module that defines it on first use
    /// (`op` names the calling op in errors).
    pub fn function(&self, op: &'static str, entry: &str) -> OpResult<CudaFunction> {
        if let Some(f) = self.functions.lock().unwrap().get(entry) {
            return Ok(f.clone());
        }
        let (module_name, image) = kernels::module_of(entry)
            .and_then(|m| Some((m, kernels::fatbin(m)?)))
            .ok_or_else(|| OpError::Device {
                op,
                msg: format!(
                    "no kernel `{entry}` among the {} entries built into this binary",
                    kernels::KERNEL_ENTRIES.len()
                ),
            })?;
        let module = {
            let mut modules = self.modules.lock().unwrap();
            match modules.get(module_name) {
                Some(m) => m.clone(),
                None => {
                    let m = module_load::load(&self.ctx, module_name, image)
                        .map_err(|msg| device_err(op, msg))?;
                    modules.insert(module_name, m.clone());
                    m
                }
            }
        };
        let f = module
            .load_function(entry)
            .map_err(|e| device_err(op, format!("kernel `{entry}`: {e}")))?;
        self.announce_unproven(op, entry)?;
        self.functions
            .lock()
            .unwrap()
            .insert(entry.to_string(), f.clone());
        Ok(f)
    }

    /// Says once, when kernel `entry` is first loaded, that its machine code has no
    /// hardware record for this device ([`provenance`]): a warning under `--gpu-kernels
    /// proven` (which runs such a kernel only where no version of its op has run on
    /// hardware), a note under `latest`.
    fn announce_unproven(&self, op: &'static str, entry: &str) -> OpResult<()> {
        let cc = self.compute_capability(op)?;
        if provenance::all_proven([entry], cc) {
            return Ok(());
        }
        let image = provenance::loaded_arch(entry, cc)
            .map_or("its PTX, compiled by the driver".to_string(), |a| {
                format!("its {a} SASS")
            });
        let text = format!(
            "kernel `{entry}` runs {image}, which has not passed parity on real hardware \
             (only on the CPU emulator); --device cpu is the reference"
        );
        match self.kernel_set {
            KernelSet::Proven => log::warn!("{text}"),
            KernelSet::Latest => log::info!("{text}"),
        }
        Ok(())
    }

    /// The kernel `<op>_<dtype>` (`layer_norm_bf16`).
    pub fn typed(&self, op: &'static str, dtype: DType) -> OpResult<CudaFunction> {
        self.typed_smem(op, op, dtype, 0)
    }

    /// The kernel `<kernel>_<dtype>` allowed `smem` bytes of dynamic shared memory:
    /// above [`DEFAULT_SMEM`] it is opted in once (and again only for a larger amount).
    pub fn typed_smem(
        &self,
        op: &'static str,
        kernel: &str,
        dtype: DType,
        smem: u32,
    ) -> OpResult<CudaFunction> {
        let entry = format!("{kernel}_{}", dtype.suffix());
        let f = self.function(op, &entry)?;
        if smem > DEFAULT_SMEM {
            let mut opted = self.smem_opt_in.lock().unwrap();
            if opted.get(&entry).is_none_or(|&done| done < smem) {
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
                .map_err(|e| {
                    device_err(
                        op,
                        format!("`{entry}` with {smem} bytes of shared memory: {e}"),
                    )
                })?;
                opted.insert(entry, smem);
            }
        }
        Ok(f)
    }

    /// Host bytes into a fresh pooled buffer.
    pub fn upload_bytes(&self, op: &'static str, bytes: &[u8]) -> OpResult<DeviceBuf> {
        let buf = self.pool.alloc(bytes.len())?;
        if !bytes.is_empty() {
            self.counts.upload(bytes.len());
            // SAFETY: `buf` holds at least `bytes.len()` bytes; pageable host memory is
            // staged by the driver before the call returns.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(buf.ptr(), bytes, self.stream.cu_stream())
            }
            .map_err(|e| device_err(op, e))?;
        }
        Ok(buf)
    }

    /// Uploads the inputs of one forward pass in one copy (see [`Staging`]), into
    /// `into` when given; returns the batch id of their slots.
    pub fn stage(&self, segments: &[Vec<u8>], into: Option<Arc<DeviceBuf>>) -> OpResult<u64> {
        self.staging.stage(
            &self.ctx,
            &self.stream,
            &self.pool,
            &self.counts,
            segments,
            into,
        )
    }

    /// The device copy of an input of `bytes` bytes: the staged one of `slot`, else
    /// `make()`'s bytes uploaded now.
    pub fn input(
        &self,
        op: &'static str,
        slot: Option<Slot>,
        bytes: usize,
        make: impl FnOnce() -> Vec<u8>,
    ) -> OpResult<DeviceInput> {
        match slot {
            Some(slot) => self.staging.resolve(op, slot, bytes),
            None => Ok(DeviceInput::Owned(self.upload_bytes(op, &make())?)),
        }
    }

    /// `u32` values (ids, offsets, index tables) on the device.
    pub fn input_u32(&self, op: &'static str, values: Input<'_, [u32]>) -> OpResult<DeviceInput> {
        self.input(op, values.slot, values.len() * 4, || u32_bytes(&values))
    }

    /// Row indices on the device (as `u32`).
    pub fn input_rows(&self, op: &'static str, rows: Input<'_, [usize]>) -> OpResult<DeviceInput> {
        self.input(op, rows.slot, rows.len() * 4, || {
            rows.iter()
                .flat_map(|&r| (r as u32).to_le_bytes())
                .collect()
        })
    }

    /// `f32` values (masks, scales, RoPE frequencies) on the device.
    pub fn input_f32(&self, op: &'static str, values: Input<'_, [f32]>) -> OpResult<DeviceInput> {
        self.input(op, values.slot, values.len() * 4, || {
            DType::F32.encode(&values)
        })
    }

    /// A layout's `cu_seqlens` and mask on the device.
    pub fn input_layout(
        &self,
        op: &'static str,
        layout: Input<'_, SeqLayout>,
    ) -> OpResult<(DeviceInput, DeviceInput)> {
        let l = layout.host;
        let cu = self.input(op, layout.slot, l.cu_seqlens.len() * 4, || {
            u32_bytes(&l.cu_seqlens_u32())
        })?;
        let mask_slot = layout.slot.map(|s| Slot {
            index: s.index + 1,
            ..s
        });
        let mask = self.input_f32(
            op,
            Input {
                host: &l.mask,
                slot: mask_slot,
            },
        )?;
        Ok((cu, mask))
    }

    /// Uploads `f32` constants (RoPE frequencies) now and keeps them; their slot.
    pub fn keep_f32(&self, op: &'static str, values: &[f32]) -> OpResult<Slot> {
        let buf = self.upload_bytes(op, &DType::F32.encode(values))?;
        Ok(self.staging.keep(buf))
    }

    /// `bytes` bytes at device address `src`, after the stream has finished.
    pub fn download_bytes(&self, op: &'static str, src: u64, bytes: usize) -> OpResult<Vec<u8>> {
        let mut out = vec![0u8; bytes];
        if bytes > 0 {
            self.counts.download(bytes);
            // SAFETY: `src` addresses at least `bytes` live bytes; the stream is
            // synchronised before `out` is read.
            unsafe {
                cudarc::driver::result::memcpy_dtoh_async(&mut out, src, self.stream.cu_stream())
            }
            .map_err(|e| device_err(op, e))?;
        }
        self.stream.synchronize().map_err(|e| device_err(op, e))?;
        Ok(out)
    }

    /// Device-to-device copy of `bytes` bytes from `src` to `dst`.
    pub fn copy_bytes(&self, op: &'static str, dst: u64, src: u64, bytes: usize) -> OpResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.counts.device_copy();
        // SAFETY: both addresses cover at least `bytes` live bytes on this stream.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream())
        }
        .map_err(|e| device_err(op, e))
    }

    /// An event that can be timed. cudarc's `new_event(None)` disables timing, and a
    /// real driver then refuses `cuEventElapsedTime` with CUDA_ERROR_INVALID_HANDLE.
    pub fn timing_event(&self) -> OpResult<CudaEvent> {
        self.ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| device_err("timer", e))
    }

    /// A pair of events: recorded now, and at [`Timer::elapsed_ms`].
    pub fn timer(&self) -> OpResult<Timer<'_>> {
        let start = self.timing_event()?;
        start
            .record(&self.stream)
            .map_err(|e| device_err("timer", e))?;
        Ok(Timer { dev: self, start })
    }

    /// Waits for all queued work; device faults surface here.
    pub fn synchronize(&self) -> OpResult<()> {
        self.stream
            .synchronize()
            .map_err(|e| device_err("synchronize", e))
    }
}

/// Device time since [`Device::timer`].
pub struct Timer<'a> {
    dev: &'a Device,
    start: CudaEvent,
}

impl Timer<'_> {
    /// Records the end event, waits for it, and returns the milliseconds between.
    pub fn elapsed_ms(&self) -> OpResult<f32> {
        let end = self.end()?;
        end.synchronize().map_err(|e| device_err("timer", e))?;
        self.start
            .elapsed_ms(&end)
            .map_err(|e| device_err("timer", e))
    }

    /// Records the end event without waiting; returns (start, end).
    pub fn end(&self) -> OpResult<CudaEvent> {
        let end = self.dev.timing_event()?;
        end.record(&self.dev.stream)
            .map_err(|e| device_err("timer", e))?;
        Ok(end)
    }

    pub fn into_start(self) -> CudaEvent {
        self.start
    }
}

/// Little-endian bytes of `values` (what a kernel reads as `unsigned`).
pub fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A 1-D launch of `threads`-wide blocks covering `n` items, capped at `max_blocks`
/// (grid-stride kernels loop over the rest).
pub fn grid_1d(n: usize, threads: u32, max_blocks: u32) -> LaunchConfig {
    let blocks = (n.div_ceil(threads as usize) as u64).clamp(1, u64::from(max_blocks)) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block of `threads` per row.
pub fn per_row(rows: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}
