//! CUDA backend (feature `cuda`): the ops of [`Backend`] as kernels from `kernels/`
//! (fatbins embedded at build time) and cuBLASLt GEMMs, on one device and one stream.
//!
//! Activations and weights live on the device as `--dtype` elements (bf16 by
//! default); every kernel accumulates in f32. Each launcher below mirrors the CPU
//! twin named in its kernel file; `tests/gpu_parity/` holds them to it.

pub mod blas;
mod causal_attention;
pub mod cutlass;
pub mod device;
pub mod disentangled_attention;
pub mod graphs;
mod heads;
pub mod memory;
pub mod module_load;
pub mod params;
pub mod profile;
mod question_loglik;
pub mod staging;
mod t5_attention;
pub mod tensor_core_check;
pub mod tensor_map;

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use cudarc::driver::{CudaFunction, DeviceRepr, LaunchArgs, LaunchConfig, PushKernelArg};

use self::device::{grid_1d, per_row, u32_bytes, Device};
pub use self::disentangled_attention::Version;
use self::memory::device_err;
pub use self::memory::CudaTensor;
use self::profile::Profiler;
use super::check::{self, Dims};
use super::{
    AddNorm, AttentionShape, Backend, BatchInputs, BatchShape, BucketBias, CausalShape, ClsHead,
    Dense, DeviceCounts, Forward, Gate, Gated, HeadNorm, Input, KernelTime, OpError, OpResult,
    Prepared, RelAttention, SeqLayout, Slot, T5AttentionShape, TokenLogits,
};
pub use crate::backend::dtype::DType;
use crate::backend::gpu_kernels::{Attention, GpuSettings, KernelSet, Op, Plan, Verdict};
use crate::backend::kernels::geometry;
use crate::tensor::HostTensor;

/// Most blocks a grid-stride elementwise kernel is launched with.
const MAX_BLOCKS: u32 = 65_535;
/// Threads per block of the row-wise and elementwise kernels.
const THREADS: u32 = geometry::ROW_THREADS;

/// Vectors per lane of the warp-per-row norm kernels' entries (up to `NORM_MAX_VECS`).
const NORM_VECS: [u32; 3] = [2, 4, geometry::NORM_MAX_VECS];

pub use self::device::device_count;

/// The CUDA backend on one device.
pub struct CudaBackend {
    /// Dropped first: a graph before the buffers it uses.
    graphs: graphs::Graphs,
    dev: Device,
    profiler: Profiler,
    /// The bf16/f16 disentangled attention ([`Version`] as its index in `Version::ALL`).
    disentangled: AtomicU8,
    /// Whether the CUTLASS bias + erf-GELU GEMM may run ([`cutlass`]).
    fused_gelu: cutlass::FusedSwitch,
    /// Whether the CUTLASS gated GEMMs may run ([`cutlass`]).
    fused_gate: cutlass::FusedSwitch,
    /// Whether the CUTLASS GEMM + residual + LayerNorm may run ([`cutlass`]).
    fused_norm: cutlass::FusedSwitch,
    /// Whether the warp-per-row `layer_norm` and `rms_norm` run where a row fits (else
    /// the block kernels).
    layer_norm_rows: AtomicBool,
    rms_norm_rows: AtomicBool,
    /// Whether RoPE runs v2 (else v1).
    rope_v2: AtomicBool,
    /// The implementations chosen when it opened.
    plan: Plan,
    /// Why a fused GEMM's setup failed, if one did ([`CudaBackend::fused_setup_failed`]).
    setup_failure: std::sync::Mutex<Option<String>>,
}

impl CudaBackend {
    /// Opens device `ordinal` with activations and weights in `dtype`, running the
    /// newest implementation of every op ([`GpuSettings::LATEST`]: what the parity tests
    /// hold to the CPU twins).
    pub fn new(ordinal: usize, dtype: DType) -> anyhow::Result<Self> {
        Self::open(ordinal, dtype, &GpuSettings::LATEST, &[], false)
    }

    /// Opens device `ordinal` with the implementations `settings` choose for it (a job's
    /// `--gpu-kernels` and switches) given the self-test's `verdicts` for this card
    /// (empty: it did not run) ([`Plan`]).
    pub fn with_settings(
        ordinal: usize,
        dtype: DType,
        settings: &GpuSettings,
        verdicts: &[Verdict],
    ) -> anyhow::Result<Self> {
        Self::open(ordinal, dtype, settings, verdicts, false)
    }

    /// As [`CudaBackend::new`], but every fresh buffer is filled with NaN bytes so
    /// that an output element a kernel leaves unwritten fails a parity test.
    pub fn poisoned(ordinal: usize, dtype: DType) -> anyhow::Result<Self> {
        Self::open(ordinal, dtype, &GpuSettings::LATEST, &[], true)
    }

    fn open(
        ordinal: usize,
        dtype: DType,
        settings: &GpuSettings,
        verdicts: &[Verdict],
        poison: bool,
    ) -> anyhow::Result<Self> {
        let dev = Device::open(ordinal, dtype, poison, settings.kernels)?;
        let cc = dev.ctx.compute_capability()?;
        let plan = Plan::new(settings, cc, dtype, verdicts).map_err(anyhow::Error::msg)?;
        let be = Self {
            graphs: graphs::Graphs::new(dev.stream.clone()),
            dev,
            profiler: Profiler::default(),
            disentangled: AtomicU8::new(0),
            fused_gelu: cutlass::FusedSwitch::new(false),
            fused_gate: cutlass::FusedSwitch::new(false),
            fused_norm: cutlass::FusedSwitch::new(false),
            layer_norm_rows: AtomicBool::new(false),
            rms_norm_rows: AtomicBool::new(false),
            rope_v2: AtomicBool::new(false),
            plan,
            setup_failure: std::sync::Mutex::new(None),
        };
        for c in &be.plan.choices {
            be.force(c.op, c.implementation);
        }
        be.set_disentangled_version(match be.plan.attention {
            Attention::V5 => Version::V5,
            Attention::Auto | Attention::V3 => Version::V3,
        })?;
        let unproven = be.plan.unproven();
        if settings.kernels == KernelSet::Proven && !unproven.is_empty() {
            log::warn!(
                "no implementation of {} has run on real hardware for this GPU \
                 (compute capability {}.{}): the most conservative one runs, checked on the \
                 CPU emulator only (`hopscore doctor --device cuda` tests them here); \
                 --device cpu is the reference",
                unproven.join(", "),
                cc.0,
                cc.1
            );
        }
        for line in be.plan.fallbacks() {
            log::warn!(
                "{line}: the GPU self-test found it does not work on this card; \
                 `hopscore doctor --device cuda` shows every verdict, --gpu-kernels proven \
                 and --fused-gelu/--fused-gate/--fused-norm off choose up front"
            );
        }
        Ok(be)
    }

    /// A fused GEMM whose setup failed on this device (`error`: a refused tensor map
    /// or shared-memory size, no cluster that fits): one warning, and its unfused path
    /// for the rest of the run. The self-test's child reports it as an error
    /// ([`CudaBackend::runs`]), so that the next job's plan leaves the kernel out.
    #[cfg(hopscore_cutlass)]
    pub(super) fn fused_setup_failed(&self, op: &'static str, error: &OpError) {
        let (switch, flag) = match op {
            "gemm_bias_gelu" => (&self.fused_gelu, "--fused-gelu"),
            "gemm_add_norm_1024" | "gemm_add_norm_768" => (&self.fused_norm, "--fused-norm"),
            _ => (&self.fused_gate, "--fused-gate"),
        };
        if switch.get() {
            switch.set(false);
            *self.setup_failure.lock().unwrap() = Some(format!("{op}: {error}"));
            log::warn!(
                "{op} cannot run on this GPU ({error}): its unfused path runs instead for the \
                 rest of this run ({flag} off chooses it up front)"
            );
        }
    }

    /// Why a fused GEMM's setup failed in this backend, if one did.
    pub fn setup_failure(&self) -> Option<String> {
        self.setup_failure.lock().unwrap().clone()
    }

    /// Whether `op` still runs `implementation` (a fused GEMM whose setup failed has
    /// gone back to its unfused path).
    pub fn runs(&self, op: Op, implementation: &str) -> bool {
        let current = match op {
            Op::LayerNorm => self.layer_norm_rows.load(Ordering::Relaxed),
            Op::RmsNorm => self.rms_norm_rows.load(Ordering::Relaxed),
            Op::Rope => self.rope_v2.load(Ordering::Relaxed),
            Op::GemmBiasGelu => self.fused_gelu.get(),
            Op::GemmGated => self.fused_gate.get(),
            Op::GemmAddNorm => self.fused_norm.get(),
        };
        let newest = matches!(implementation, "rows" | "v2" | "fused");
        current == newest
    }

    /// Runs `implementation` of `op` from now on (the self-test's child runs one case
    /// this way; [`Plan::cases`] names them); an unknown name changes nothing.
    pub fn force(&self, op: Op, implementation: &str) {
        let on = |name| implementation == name;
        match op {
            Op::LayerNorm => self.layer_norm_rows.store(on("rows"), Ordering::Relaxed),
            Op::RmsNorm => self.rms_norm_rows.store(on("rows"), Ordering::Relaxed),
            Op::Rope => self.rope_v2.store(on("v2"), Ordering::Relaxed),
            Op::GemmBiasGelu => self.fused_gelu.set(on("fused")),
            Op::GemmGated => self.fused_gate.set(on("fused")),
            Op::GemmAddNorm => self.fused_norm.set(on("fused")),
        }
    }

    /// What runs for each op with more than one implementation, and why (the
    /// `hopscore.gpu_kernels` metadata).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Picks the bf16/f16 disentangled-attention kernel; v5 needs compute
    /// capability 9.0 (H100, H200).
    pub fn set_disentangled_version(&self, version: Version) -> anyhow::Result<()> {
        let cc = self.dev.ctx.compute_capability()?;
        anyhow::ensure!(
            version.runs_on(cc),
            "--attention {}: the Hopper kernels run on compute capability 9.0 (H100, H200) \
             only; this GPU is {}.{}: use v3",
            format!("{version:?}").to_lowercase(),
            cc.0,
            cc.1
        );
        self.disentangled.store(version.index(), Ordering::Relaxed);
        Ok(())
    }

    /// The bf16/f16 disentangled-attention kernel in use.
    pub fn disentangled_version(&self) -> Version {
        Version::ALL[usize::from(self.disentangled.load(Ordering::Relaxed))]
    }

    /// Lets the CUTLASS bias + erf-GELU GEMM run where it can (`--fused-gelu`), or runs
    /// the cuBLASLt GEMM and the GELU pass (`false`).
    pub fn set_fused_gelu(&self, on: bool) {
        self.fused_gelu.set(on);
    }

    /// Lets the CUTLASS gated GEMMs run where they can (`--fused-gate`), or runs the
    /// cuBLASLt GEMM and the `gated_act` pass (`false`).
    pub fn set_fused_gate(&self, on: bool) {
        self.fused_gate.set(on);
    }

    /// Lets the CUTLASS GEMM + residual + LayerNorm run where it can (`--fused-norm`),
    /// or runs the cuBLASLt GEMM and the `layer_norm` pass (`false`).
    pub fn set_fused_norm(&self, on: bool) {
        self.fused_norm.set(on);
    }

    /// bf16 or f16 on compute capability 9.0: where the Hopper kernels run.
    fn is_hopper_16_bit(&self) -> OpResult<bool> {
        let cc = self.dev.compute_capability("compute capability")?;
        Ok(self.dev.dtype != DType::F32 && Version::V5.runs_on(cc))
    }

    /// Turns CUDA graphs of whole forwards on or off (on by default; `--cuda-graphs`;
    /// see [`graphs`]).
    pub fn set_cuda_graphs(&self, on: bool) {
        self.graphs.set_enabled(on);
    }

    /// One cuBLASLt algorithm per GEMM whatever the batch (on by default: a row's
    /// results are the same bits in any batch; see [`blas`]), or cuBLASLt's choice per
    /// row count (`false`).
    pub fn set_batch_invariant(&self, on: bool) {
        self.dev.lt.set_batch_invariant(on);
    }

    pub fn device(&self) -> &Device {
        &self.dev
    }

    fn tensor(&self, rows: usize, cols: usize) -> OpResult<CudaTensor> {
        let dtype = self.dev.dtype;
        let buf = self.dev.pool.alloc(rows * cols * dtype.size())?;
        Ok(CudaTensor::new(buf, rows, cols, dtype))
    }

    /// Launches `<op>_<dtype>` with `args` in the kernel's parameter order.
    fn launch(&self, op: &'static str, cfg: LaunchConfig, args: &[Arg]) -> OpResult<()> {
        let f = self.dev.typed(op, self.dev.dtype)?;
        self.launch_fn(op, &f, cfg, args)
    }

    /// Launches kernel `f` with `args` in its parameter order, profiled as `op`.
    fn launch_fn(
        &self,
        op: &'static str,
        f: &CudaFunction,
        cfg: LaunchConfig,
        args: &[Arg],
    ) -> OpResult<()> {
        let mut b = self.dev.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(v) => b.arg(v),
                Arg::U32(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
            };
        }
        // SAFETY: each launcher passes the argument list of its kernel's signature,
        // with pointers to live buffers of the checked shapes.
        unsafe { self.timed_launch(op, b, cfg) }
    }

    /// Launches `<kernel>_<dtype>`, a version of `op` whose one argument is the
    /// parameter struct `params` (a mirror of `kernels/params.cuh`), opted in to its
    /// dynamic shared memory above the default 48 KiB.
    fn launch_params<P: DeviceRepr>(
        &self,
        op: &'static str,
        kernel: &'static str,
        cfg: LaunchConfig,
        params: &P,
    ) -> OpResult<()> {
        let f = self
            .dev
            .typed_smem(op, kernel, self.dev.dtype, cfg.shared_mem_bytes)?;
        let mut b = self.dev.stream.launch_builder(&f);
        b.arg(params);
        // SAFETY: `P` is the kernel's parameter struct (its size asserted against the
        // header), filled with pointers to live buffers of the checked shapes.
        unsafe { self.timed_launch(op, b, cfg) }
    }

    /// Launches `b`, timed as `op`.
    ///
    /// # Safety
    /// The arguments pushed into `b` must be those of the kernel's signature.
    unsafe fn timed_launch(
        &self,
        op: &'static str,
        mut b: LaunchArgs<'_>,
        cfg: LaunchConfig,
    ) -> OpResult<()> {
        let _timed = self.profiler.time(&self.dev, op)?;
        self.dev.counts.launch();
        // SAFETY: the caller's contract.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(|e| device_err(op, e))
    }

    /// [`Device::launch_cluster`], counted and timed as [`Self::timed_launch`].
    ///
    /// # Safety
    /// As [`Device::launch_cluster`].
    #[cfg(hopscore_cutlass)]
    unsafe fn timed_cluster_launch(
        &self,
        op: &'static str,
        f: &CudaFunction,
        cfg: LaunchConfig,
        cluster: (u32, u32, u32),
        args: &mut [*mut std::ffi::c_void],
    ) -> OpResult<()> {
        let _timed = self.profiler.time(&self.dev, op)?;
        self.dev.counts.launch();
        // SAFETY: the caller's contract.
        unsafe { self.dev.launch_cluster(f, cfg, cluster, args) }.map_err(|e| device_err(op, e))
    }

    /// [`blas::gemm`], timed as the GEMMs.
    fn gemm(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        y: u64,
        parts: usize,
        epilogue: blas::Epilogue,
        beta: f32,
    ) -> OpResult<()> {
        let _timed = self.profiler.time(&self.dev, "gemm (cuBLASLt)")?;
        blas::gemm(&self.dev, x, w, y, parts, epilogue, beta)
    }

    /// `x · wᵀ` into a new tensor, the bias (and, with `gelu_new`, GPT-2's tanh GELU)
    /// in the GEMM's epilogue.
    fn linear_epilogue(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        gelu_new: bool,
    ) -> OpResult<CudaTensor> {
        check::linear(x, w, bias)?;
        let y = self.tensor(x.rows, w.rows)?;
        self.gemm(x, w, y.ptr(), 1, blas::Epilogue::of(bias, gelu_new), 0.0)?;
        Ok(y)
    }

    /// The segments [`Backend::prepare_batch`] stages for `inputs`, in the slot order
    /// of [`prepared`]: each layout's `cu_seqlens` and mask, the relative index (v1)
    /// or band table (v3) of the first layout, and the id lists (last: a graph reads
    /// the inputs before the ones for the ops after it).
    fn segments(&self, inputs: &BatchInputs<'_>) -> Vec<Vec<u8>> {
        let mut segments = Vec::new();
        for l in &inputs.layouts {
            segments.push(u32_bytes(&l.cu_seqlens_u32()));
            segments.push(DType::F32.encode(&l.mask));
        }
        if let (Some(index), Some(l)) = (inputs.rel_index, inputs.layouts.first()) {
            segments.push(disentangled_attention::rel_segment(
                self.dev.dtype,
                index,
                l.max_len(),
            ));
        }
        for ids in &inputs.ids {
            segments.push(u32_bytes(ids));
        }
        segments
    }

    /// A copy of the first `rows` rows of `t` (the real tokens of a padded batch).
    fn first_rows(&self, t: &CudaTensor, rows: usize) -> OpResult<CudaTensor> {
        let out = self.tensor(rows, t.cols)?;
        self.dev
            .copy_bytes("first_rows", out.ptr(), t.ptr(), out.bytes())?;
        Ok(out)
    }

    /// Elements of the device dtype in 16 bytes (the vector kernels' step).
    fn vec_width(&self) -> usize {
        16 / self.dev.dtype.size()
    }

    /// RoPE v1 (kernels/rope_v1.cu, the 2026-11-26 kernel): a block per row, the
    /// row's cos/sin table in shared memory (`head_dim` floats).
    fn rope_v1(
        &self,
        x: &mut CudaTensor,
        heads: usize,
        head_dim: usize,
        pos: &staging::DeviceInput,
        freq: &staging::DeviceInput,
    ) -> OpResult<()> {
        let cfg = LaunchConfig {
            shared_mem_bytes: (head_dim * std::mem::size_of::<f32>()) as u32,
            ..per_row(x.rows, geometry::ROPE_V1_THREADS)
        };
        if cfg.shared_mem_bytes > device::DEFAULT_SMEM {
            return Err(OpError::Shape {
                op: "rope",
                msg: format!(
                    "head_dim {head_dim} exceeds rope v1's 12,288 (--gpu-kernels latest runs v2)"
                ),
            });
        }
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(pos.ptr()),
            Arg::Ptr(freq.ptr()),
            Arg::U32(x.rows as u32),
            Arg::U32(x.cols as u32),
            Arg::U32(heads as u32),
            Arg::U32(head_dim as u32),
        ];
        self.launch("rope_v1", cfg, &args)
    }

    /// The warp-per-row kernel of `op` (`layer_norm`, `rms_norm`: `<op>_rows<NV>` of
    /// kernels/layer_norm.cu and rms_norm.cu) for rows of `cols`, and its launch, when
    /// the row fits a warp's registers as 16-byte vectors: cols a multiple of the
    /// vector, at most `32 × NORM_MAX_VECS` of them, and every address among the
    /// kernel's `args` (each one a row-major tensor it reads or writes by vectors)
    /// aligned. `None`: the block-per-row kernel.
    fn norm_rows(
        &self,
        op: &'static str,
        rows: usize,
        cols: usize,
        args: &[Arg],
    ) -> OpResult<Option<(CudaFunction, LaunchConfig)>> {
        let chosen = match op {
            "layer_norm" => &self.layer_norm_rows,
            _ => &self.rms_norm_rows,
        };
        let v = self.vec_width();
        let unaligned = |a: &Arg| matches!(a, Arg::Ptr(p) if !p.is_multiple_of(16));
        if !chosen.load(Ordering::Relaxed) || !cols.is_multiple_of(v) || args.iter().any(unaligned)
        {
            return Ok(None);
        }
        let per_lane = (cols / v).div_ceil(32) as u32;
        let Some(nv) = NORM_VECS.into_iter().find(|&nv| per_lane <= nv) else {
            return Ok(None);
        };
        let f = self
            .dev
            .typed_smem(op, &format!("{op}_rows{nv}"), self.dev.dtype, 0)?;
        let rows_per_block = geometry::NORM_ROWS as usize;
        let cfg = LaunchConfig {
            grid_dim: (rows.div_ceil(rows_per_block) as u32, 1, 1),
            block_dim: (geometry::NORM_ROWS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        Ok(Some((f, cfg)))
    }

    /// The kernel `op(x, [y,] n)` mapping `x` (and `y`) into `x`, 16-byte vectors per
    /// thread where the kernel can (`map_inplace` of kernels/common.cuh).
    fn map_inplace(
        &self,
        op: &'static str,
        x: &CudaTensor,
        y: Option<&CudaTensor>,
    ) -> OpResult<()> {
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        let mut args = vec![Arg::Ptr(x.ptr())];
        args.extend(y.map(|y| Arg::Ptr(y.ptr())));
        args.push(Arg::U32(index_u32(op, n)?));
        let cfg = grid_1d(n.div_ceil(self.vec_width()), THREADS, MAX_BLOCKS);
        self.launch(op, cfg, &args)
    }
}

/// A kernel argument (device pointers are `u64` addresses; null is 0).
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    Ptr(u64),
    U32(u32),
    F32(f32),
}

/// The slots of the segments of [`CudaBackend::segments`] in staged batch `batch`.
fn prepared(inputs: &BatchInputs<'_>, batch: u64) -> Prepared {
    let slot = |index: usize| Slot {
        batch,
        index: index as u32,
    };
    let rel_at = 2 * inputs.layouts.len();
    let rel = inputs.rel_index.is_some() && !inputs.layouts.is_empty();
    let ids_at = rel_at + usize::from(rel);
    Prepared {
        layouts: (0..inputs.layouts.len()).map(|i| slot(2 * i)).collect(),
        rel_index: rel.then(|| slot(rel_at)),
        ids: (ids_at..ids_at + inputs.ids.len()).map(slot).collect(),
    }
}

/// `n` elements as the 32-bit index of the elementwise kernels (below 2^31, so that a
/// grid-stride step cannot wrap).
fn index_u32(op: &'static str, n: usize) -> OpResult<u32> {
    u32::try_from(n)
        .ok()
        .filter(|&n| n <= i32::MAX as u32)
        .ok_or_else(|| OpError::Shape {
            op,
            msg: format!("{n} elements exceed the kernel's 32-bit indexing (2^31 − 1); use smaller batches (--max-batch-tokens)"),
        })
}

fn ptr_or_null(t: Option<&CudaTensor>) -> u64 {
    t.map_or(0, CudaTensor::ptr)
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;

    fn dtype(&self) -> DType {
        self.dev.dtype
    }

    fn name(&self) -> String {
        format!(
            "cuda:{} ({}, {})",
            self.dev.ctx.ordinal(),
            self.dev.name(),
            self.dev.dtype.suffix()
        )
    }

    fn kernel_plan(&self) -> Option<String> {
        Some(self.plan.describe())
    }

    fn synchronize(&self) -> OpResult<()> {
        self.dev.synchronize()
    }

    /// Times every kernel and GEMM with CUDA events (a little overhead per launch).
    fn start_profile(&self) {
        self.profiler.start();
    }

    fn finish_profile(&self) -> OpResult<Vec<KernelTime>> {
        self.dev.synchronize()?;
        self.profiler.finish()
    }

    /// Stages every input in one pinned copy: the layouts' `cu_seqlens` and masks, the
    /// ids, and the relative index (v1) or band table (v3) of the first layout.
    fn prepare_batch(&self, inputs: &BatchInputs<'_>) -> OpResult<Prepared> {
        let segments = self.segments(inputs);
        let batch = self.dev.stage(&segments, None)?;
        Ok(prepared(inputs, batch))
    }

    fn graph_bucket(&self, shape: BatchShape, max_len_limit: usize) -> Option<BatchShape> {
        self.graphs
            .enabled()
            .then(|| graphs::bucket(shape, max_len_limit))
    }

    fn run_forward(
        &self,
        key: Option<u64>,
        inputs: &BatchInputs<'_>,
        graph_ids: usize,
        rows: usize,
        forward: &mut Forward<'_, CudaTensor>,
    ) -> anyhow::Result<(CudaTensor, Prepared)> {
        let graphs = self.graphs.enabled() && !self.profiler.active();
        graphs::run(
            self,
            key.filter(|_| graphs),
            inputs,
            graph_ids,
            rows,
            forward,
        )
    }

    fn keep_constant(&self, values: &[f32]) -> OpResult<Option<Slot>> {
        self.dev.keep_f32("keep_constant", values).map(Some)
    }

    fn counts(&self) -> Option<DeviceCounts> {
        Some(self.dev.counts.snapshot())
    }

    fn gemm_tflops(&self, n: usize, iters: usize) -> OpResult<Option<f64>> {
        // Random operands: zeros or constants draw less power and would flatter the peak.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut random = || {
            let data = (0..n * n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect();
            self.upload(&HostTensor::new(vec![n, n], data))
        };
        let (x, w) = (random()?, random()?);
        let y = self.tensor(n, n)?;
        let plain = blas::Epilogue::Plain;
        blas::gemm(&self.dev, &x, &w, y.ptr(), 1, plain, 0.0)?;
        let timer = self.dev.timer()?;
        for _ in 0..iters.max(1) {
            blas::gemm(&self.dev, &x, &w, y.ptr(), 1, plain, 0.0)?;
        }
        let ms = timer.elapsed_ms()?;
        let flops = 2.0 * (n as f64).powi(3) * iters.max(1) as f64;
        Ok(Some(flops / (f64::from(ms) * 1e-3) / 1e12))
    }

    fn upload(&self, t: &HostTensor) -> OpResult<CudaTensor> {
        let (rows, cols) = check::matrix_shape(&t.shape)?;
        let dtype = self.dev.dtype;
        let buf = self.dev.upload_bytes("upload", &dtype.encode(&t.data))?;
        Ok(CudaTensor::new(buf, rows, cols, dtype))
    }

    fn download(&self, t: &CudaTensor) -> OpResult<HostTensor> {
        let bytes = self.dev.download_bytes("download", t.ptr(), t.bytes())?;
        Ok(HostTensor::new(
            vec![t.rows, t.cols],
            t.dtype.decode(&bytes),
        ))
    }

    fn linear(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> OpResult<CudaTensor> {
        self.linear_epilogue(x, w, bias, false)
    }

    /// One strided-batched GEMM (bias in the epilogue) writing the parts back to back.
    fn linear_split(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        parts: usize,
    ) -> OpResult<Vec<CudaTensor>> {
        check::linear_split(x, w, bias, parts)?;
        let out = w.rows / parts;
        let buf = self
            .dev
            .pool
            .alloc(x.rows * w.rows * self.dev.dtype.size())?;
        let ys = CudaTensor::split(buf, parts, x.rows, out, self.dev.dtype);
        self.gemm(
            x,
            w,
            ys[0].ptr(),
            parts,
            blas::Epilogue::of(bias, false),
            0.0,
        )?;
        Ok(ys)
    }

    /// `x` is the GEMM's C and D (beta = 1): the residual sum is rounded once.
    fn linear_add(
        &self,
        x: &mut CudaTensor,
        input: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> OpResult<()> {
        check::linear_add(x, input, w, bias)?;
        self.gemm(input, w, x.ptr(), 1, blas::Epilogue::of(bias, false), 1.0)
    }

    /// The bias and the tanh GELU in the GEMM's epilogue (one rounding).
    fn linear_gelu_new(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> OpResult<CudaTensor> {
        self.linear_epilogue(x, w, bias, true)
    }

    /// The CUTLASS kernel with the bias and the erf GELU in its epilogue where it runs
    /// ([`cutlass::gemm_bias_gelu`]), else the cuBLASLt GEMM and the GELU pass.
    fn linear_gelu(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
    ) -> OpResult<CudaTensor> {
        match cutlass::gemm_bias_gelu(self, x, w, bias)? {
            Some(y) => Ok(y),
            None => super::linear_then(self, x, w, bias, Self::gelu),
        }
    }

    /// The CUTLASS kernel with the gate in its epilogue where it runs
    /// ([`cutlass::gemm_gated`]), else the cuBLASLt GEMM and the `gated_act` pass.
    fn linear_gated(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        gated: Gated,
    ) -> OpResult<CudaTensor> {
        match cutlass::gemm_gated(self, x, w, bias, gated)? {
            Some(y) => Ok(y),
            None => self.gated_act(&self.linear(x, w, bias)?, gated),
        }
    }

    /// The CUTLASS kernel with the residual and the LayerNorm in its epilogue where it
    /// runs ([`cutlass::gemm_add_norm`]), else the cuBLASLt GEMM and the `layer_norm`
    /// pass.
    fn linear_add_norm(
        &self,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: Option<&CudaTensor>,
        norm: &AddNorm<'_, CudaTensor>,
    ) -> OpResult<CudaTensor> {
        match cutlass::gemm_add_norm(self, x, w, bias, norm)? {
            Some(y) => Ok(y),
            None => super::linear_then(self, x, w, bias, |be, y| super::add_norm(be, y, norm)),
        }
    }

    fn gelu(&self, x: &mut CudaTensor) -> OpResult<()> {
        self.map_inplace("gelu", x, None)
    }

    fn layer_norm(
        &self,
        x: &mut CudaTensor,
        residual: Option<&CudaTensor>,
        weight: &CudaTensor,
        bias: &CudaTensor,
        eps: f32,
    ) -> OpResult<()> {
        check::layer_norm(x, residual, weight, bias)?;
        if x.rows == 0 {
            return Ok(());
        }
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(ptr_or_null(residual)),
            Arg::Ptr(weight.ptr()),
            Arg::Ptr(bias.ptr()),
            Arg::U32(x.rows as u32),
            Arg::U32(x.cols as u32),
            Arg::F32(eps),
        ];
        if let Some((f, cfg)) = self.norm_rows("layer_norm", x.rows, x.cols, &args)? {
            return self.launch_fn("layer_norm", &f, cfg, &args);
        }
        let smem = geometry::layer_norm_smem(x.cols as u32);
        if smem > device::DEFAULT_SMEM {
            return Err(OpError::Shape {
                op: "layer_norm",
                msg: format!("{} columns exceed the kernel's 12,288", x.cols),
            });
        }
        let cfg = LaunchConfig {
            shared_mem_bytes: smem,
            ..per_row(x.rows, THREADS)
        };
        self.launch("layer_norm", cfg, &args)
    }

    fn embedding(&self, lookups: &[(&CudaTensor, Input<'_, [u32]>)]) -> OpResult<CudaTensor> {
        let (cols, tokens) = check::embedding(lookups)?;
        if lookups.len() > 3 {
            return Err(OpError::Shape {
                op: "embedding",
                msg: format!("{} tables; the kernel sums at most 3", lookups.len()),
            });
        }
        let out = self.tensor(tokens, cols)?;
        if tokens == 0 {
            return Ok(out);
        }
        let ids = lookups
            .iter()
            .map(|(_, ids)| self.dev.input_u32("embedding", *ids))
            .collect::<OpResult<Vec<_>>>()?;
        let mut args = vec![Arg::Ptr(out.ptr())];
        for k in 0..3 {
            match (lookups.get(k), ids.get(k)) {
                (Some((table, _)), Some(ids)) => {
                    args.extend([Arg::Ptr(table.ptr()), Arg::Ptr(ids.ptr())])
                }
                _ => args.extend([Arg::Ptr(0), Arg::Ptr(0)]),
            }
        }
        args.extend([Arg::U32(tokens as u32), Arg::U32(cols as u32)]);
        self.launch("embedding", per_row(tokens, THREADS), &args)?;
        Ok(out)
    }

    fn scale_rows(&self, x: &mut CudaTensor, scale: Input<'_, [f32]>) -> OpResult<()> {
        check::scale_rows(x, &scale)?;
        if x.numel() == 0 {
            return Ok(());
        }
        let s = self.dev.input_f32("scale_rows", scale)?;
        let args = [
            Arg::Ptr(x.ptr()),
            Arg::Ptr(s.ptr()),
            Arg::U32(x.rows as u32),
            Arg::U32(x.cols as u32),
        ];
        self.launch("scale_rows", grid_1d(x.numel(), THREADS, MAX_BLOCKS), &args)
    }

    fn disentangled_attention(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        rel: Option<&RelAttention<'_, CudaTensor>>,
        shape: AttentionShape,
        layout: Input<'_, SeqLayout>,
    ) -> OpResult<CudaTensor> {
        check::disentangled_attention([q, k, v], shape, &layout)?;
        disentangled_attention::disentangled_attention(self, [q, k, v], rel, shape, layout)
    }

    fn gather_rows(&self, x: &CudaTensor, rows: Input<'_, [usize]>) -> OpResult<CudaTensor> {
        check::gather_rows(x, &rows)?;
        let out = self.tensor(rows.len(), x.cols)?;
        if out.numel() == 0 {
            return Ok(out);
        }
        let idx = self.dev.input_rows("gather_rows", rows)?;
        let args = [
            Arg::Ptr(out.ptr()),
            Arg::Ptr(x.ptr()),
            Arg::Ptr(idx.ptr()),
            Arg::U32(rows.len() as u32),
            Arg::U32(x.cols as u32),
        ];
        self.launch("gather_rows", per_row(rows.len(), THREADS), &args)?;
        Ok(out)
    }

    fn cls_head(
        &self,
        hidden: &CudaTensor,
        layout: Input<'_, SeqLayout>,
        head: &ClsHead<'_, CudaTensor>,
    ) -> OpResult<HostTensor> {
        let dims = check::cls_head(hidden, &layout, head)?;
        heads::cls_head(self, hidden, layout, head, dims)
    }

    fn token_head(
        &self,
        hidden: &CudaTensor,
        classifier: Dense<'_, CudaTensor>,
    ) -> OpResult<TokenLogits> {
        let labels = check::token_head(hidden, classifier)?;
        heads::token_head(self, hidden, classifier, labels)
    }

    fn copy(&self, x: &CudaTensor) -> OpResult<CudaTensor> {
        let out = self.tensor(x.rows, x.cols)?;
        self.dev.copy_bytes("copy", out.ptr(), x.ptr(), x.bytes())?;
        Ok(out)
    }

    fn add(&self, x: &mut CudaTensor, y: &CudaTensor) -> OpResult<()> {
        check::add(x, y)?;
        self.map_inplace("add", x, Some(y))
    }

    fn rms_norm(&self, x: &CudaTensor, weight: &CudaTensor, eps: f32) -> OpResult<CudaTensor> {
        check::rms_norm(x, weight)?;
        let out = self.tensor(x.rows, x.cols)?;
        if out.numel() == 0 {
            return Ok(out);
        }
        let args = [
            Arg::Ptr(out.ptr()),
            Arg::Ptr(x.ptr()),
            Arg::Ptr(weight.ptr()),
            Arg::U32(x.rows as u32),
            Arg::U32(x.cols as u32),
            Arg::F32(eps),
        ];
        match self.norm_rows("rms_norm", x.rows, x.cols, &args)? {
            Some((f, cfg)) => self.launch_fn("rms_norm", &f, cfg, &args)?,
            None => self.launch("rms_norm", per_row(x.rows, THREADS), &args)?,
        }
        Ok(out)
    }

    fn gelu_new(&self, x: &mut CudaTensor) -> OpResult<()> {
        self.map_inplace("gelu_new", x, None)
    }

    fn gated_act(&self, x: &CudaTensor, gated: Gated) -> OpResult<CudaTensor> {
        let inter = check::gated_act(x, gated.block)?;
        let out = self.tensor(x.rows, inter)?;
        if out.numel() == 0 {
            return Ok(out);
        }
        let op = match gated.gate {
            Gate::Silu => "gated_silu",
            Gate::GeluNew => "gated_gelu_new",
            Gate::Gelu => "gated_gelu",
        };
        index_u32(op, x.numel())?;
        let args = [
            Arg::Ptr(out.ptr()),
            Arg::Ptr(x.ptr()),
            Arg::U32(x.rows as u32),
            Arg::U32(inter as u32),
            Arg::U32(gated.block as u32),
        ];
        let cfg = grid_1d(out.numel().div_ceil(self.vec_width()), THREADS, MAX_BLOCKS);
        self.launch(op, cfg, &args)?;
        Ok(out)
    }

    fn relu(&self, x: &mut CudaTensor) -> OpResult<()> {
        self.map_inplace("relu", x, None)
    }

    fn t5_attention(
        &self,
        q: &CudaTensor,
        k: &CudaTensor,
        v: &CudaTensor,
        bias: Option<&BucketBias<'_, CudaTensor>>,
        shape: T5AttentionShape,
        q_layout: Input<'_, SeqLayout>,
        kv_layout: Input<'_, SeqLayout>,
    ) -> OpResult<CudaTensor> {
        let checked = bias.map(|b| (b.table, b.index.host));
        let max_len = check::t5_attention((q, k, v), checked, shape, &q_layout, &kv_layout)?;
        t5_attention::launch(self, (q, k, v), bias, shape, (q_layout, kv_layout), max_len)
    }

    fn rope(
        &self,
        x: &mut CudaTensor,
        heads: usize,
        head_dim: usize,
        positions: Input<'_, [u32]>,
        inv_freq: Input<'_, [f32]>,
        norm: Option<HeadNorm<'_, CudaTensor>>,
    ) -> OpResult<()> {
        check::rope(x, heads, head_dim, &positions, &inv_freq, norm)?;
        if x.rows == 0 || heads == 0 || head_dim < 2 {
            return Ok(());
        }
        let pos = self.dev.input_u32("rope", positions)?;
        let freq = self.dev.input_f32("rope", inv_freq)?;
        if norm.is_none() && !self.rope_v2.load(Ordering::Relaxed) {
            return self.rope_v1(x, heads, head_dim, &pos, &freq);
        }
        // A warp per row, ROPE_ROWS rows a block.
        let rows_per_block = geometry::ROPE_ROWS as usize;
        let cfg = LaunchConfig {
            grid_dim: (x.rows.div_ceil(rows_per_block) as u32, 1, 1),
            block_dim: (geometry::ROPE_ROWS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = vec![Arg::Ptr(x.ptr()), Arg::Ptr(pos.ptr()), Arg::Ptr(freq.ptr())];
        if let Some(n) = norm {
            args.extend([Arg::Ptr(n.q_weight.ptr()), Arg::Ptr(n.k_weight.ptr())]);
        }
        args.extend([
            Arg::U32(x.rows as u32),
            Arg::U32(x.cols as u32),
            Arg::U32(heads as u32),
        ]);
        let kernel = match norm {
            None => "rope",
            Some(n) => {
                args.push(Arg::U32(n.q_heads as u32));
                "rope_qk_norm"
            }
        };
        args.push(Arg::U32(head_dim as u32));
        if let Some(n) = norm {
            args.push(Arg::F32(n.eps));
        }
        self.launch(kernel, cfg, &args)
    }

    fn causal_attention(
        &self,
        qkv: &CudaTensor,
        shape: CausalShape,
        layout: Input<'_, SeqLayout>,
        first_query: Option<Input<'_, [u32]>>,
    ) -> OpResult<CudaTensor> {
        check::causal_attention(qkv, shape, &layout, first_query.as_deref())?;
        causal_attention::launch(self, qkv, shape, layout, first_query)
    }

    fn question_loglik(
        &self,
        hidden: &CudaTensor,
        rows: Input<'_, [usize]>,
        lm_head: &CudaTensor,
        targets: Input<'_, [u32]>,
        temperature: f32,
    ) -> OpResult<Vec<f32>> {
        check::question_loglik(hidden, &rows, lm_head, &targets, temperature)?;
        question_loglik::launch(self, hidden, rows, lm_head, targets, temperature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kernels::{module_of, MODULES};

    /// Every entry a launcher can ask for, in every dtype and head size, is in the
    /// PTX built into this binary (a renamed kernel or launcher typo fails here
    /// instead of at the first launch on a GPU).
    #[test]
    fn every_launched_entry_is_built() {
        if MODULES.is_empty() {
            assert_ne!(
                option_env!("HOPSCORE_REQUIRE_NVCC"),
                Some("1"),
                "built without kernels under HOPSCORE_REQUIRE_NVCC=1"
            );
            return;
        }
        const PLAIN: &[&str] = &[
            "add",
            "cls_head",
            "cls_head_tanh",
            "embedding",
            "gather_rows",
            "gelu",
            "gelu_new",
            "layer_norm",
            "question_loglik",
            "rms_norm",
            "rope",
            "rope_qk_norm",
            "rope_v1",
            "gated_gelu_new",
            "gated_gelu",
            "gated_silu",
            "relu",
            "scale_rows",
            "t5_attention",
            "token_head",
        ];
        let mut missing = Vec::new();
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            let mut kernels: Vec<&str> = PLAIN.to_vec();
            for d in (8..=128).step_by(4) {
                kernels.push(causal_attention::version(dtype, d).1);
                kernels.push(t5_attention::version(dtype, d).1);
                if d % 8 == 0 {
                    for v in Version::ALL {
                        kernels.push(disentangled_attention::kernel(dtype, v, d));
                    }
                }
            }
            if dtype != DType::F32 {
                kernels.push("tensor_core_check");
            }
            let mut entries: Vec<String> = kernels.iter().map(|k| k.to_string()).collect();
            for nv in NORM_VECS {
                entries.push(format!("layer_norm_rows{nv}"));
                entries.push(format!("rms_norm_rows{nv}"));
            }
            for k in entries {
                let entry = format!("{k}_{}", dtype.suffix());
                if module_of(&entry).is_none() {
                    missing.push(entry);
                }
            }
        }
        assert!(module_of("question_loglik_merge").is_some());
        assert_eq!(module_of("no_such_kernel"), None);
        assert!(missing.is_empty(), "launched but not built: {missing:?}");
    }
}
