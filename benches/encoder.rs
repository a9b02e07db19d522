//! `cargo bench`: encoder throughput of the CPU backend on the small shape at
//! L = 128 and 256 (the same code as `hopscore bench`; use that for base/large).

use hopscore::backend::cpu::CpuBackend;
use hopscore::bench::{run, BenchSpec, ModelShape};

fn main() -> anyhow::Result<()> {
    for seq_len in [128, 256] {
        let r = run(
            &CpuBackend::F32,
            BenchSpec {
                shape: ModelShape::Small,
                seq_len,
                batch: 8,
                warmup: 1,
                iters: 3,
                peak_gemm: 0,
                profile: false,
                tanh_gelu: false,
            },
        )?;
        println!(
            "encoder/small/L{seq_len}: {:.0} tokens/s, {:.1} GFLOP/s ({} threads)",
            r.tokens_per_s, r.gflops, r.threads
        );
    }
    Ok(())
}
