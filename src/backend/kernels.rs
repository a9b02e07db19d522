//! PTX of every `kernels/<op>.cu`, embedded at build time by build.rs (empty when the
//! crate was built without nvcc).

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// The PTX of op `name`, if it was compiled into this binary.
pub fn ptx(name: &str) -> Option<&'static str> {
    PTX_MODULES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
}
