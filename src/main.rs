//! `hopscore` binary: runs the command line through [`hopscore::cli::main_with_args`]
//! (shared with the Python package's console script) and exits with its code.

/// mimalloc keeps freed pages for reuse: the CPU backend allocates a fresh activation
/// matrix per op, which glibc's allocator returns to the kernel and faults in again.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h's `mi_option_e` (v2 and v3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() {
    keep_freed_pages();
    // The GPU self-test runs each kernel case in a child: this binary.
    if let Ok(exe) = std::env::current_exe() {
        hopscore::jobs::selftest::set_runner(vec![exe.into_os_string()]);
    }
    std::process::exit(hopscore::cli::main_with_args(std::env::args_os()));
}

/// Never hands freed pages back to the OS (mimalloc's default purges them after 10 ms):
/// the ops free and allocate matrices of the same sizes over and over, and faulting
/// the pages in again took ≈ 6 % of a SmolLM2 scoring run on the CPU. Memory stays at
/// the run's high-water mark. `MIMALLOC_PURGE_DELAY` (milliseconds) still decides when set.
fn keep_freed_pages() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a plain integer option; mimalloc reads it at each purge.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}
