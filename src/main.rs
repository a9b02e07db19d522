//! `hopscore` binary: runs the command line through [`hopscore::cli::main_with_args`]
//! (shared with the Python package's console script) and exits with its code.

/// mimalloc keeps freed pages for reuse: the CPU backend allocates a fresh activation
/// matrix per op, which glibc's allocator returns to the kernel and faults in again.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(hopscore::cli::main_with_args(std::env::args_os()));
}
