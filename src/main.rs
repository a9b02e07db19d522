//! `hopscore` binary: runs the command line through [`hopscore::cli::main_with_args`]
//! (shared with the Python package's console script) and exits with its code.

fn main() {
    std::process::exit(hopscore::cli::main_with_args(std::env::args_os()));
}
