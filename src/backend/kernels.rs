//! The fatbin of every `kernels/<op>.cu` and the list of its kernel entry points,
//! embedded at build time by build.rs (both empty when the crate was built without
//! nvcc).

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// The fatbin of op `name`, if it was compiled into this binary.
pub fn fatbin(name: &str) -> Option<&'static [u8]> {
    MODULES.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// The op (module) that defines kernel `entry`, if it is in this binary.
pub fn module_of(entry: &str) -> Option<&'static str> {
    KERNEL_ENTRIES
        .iter()
        .find(|(e, _)| *e == entry)
        .map(|(_, m)| *m)
}
