//! Reader of the fatbin container `nvcc -fatbin` writes: the list of its images (SASS
//! per `sm_XY`, PTX per `compute_XY`) and the text of uncompressed PTX. std only: build.rs
//! includes this file too (`#[path]`), to check each fatbin it builds and to read the
//! kernel entry points from its PTX.
//!
//! Layout (little-endian): a 16-byte header (magic `0xBA55ED50`, version, header size,
//! size of the images that follow), then images, each an entry header (kind 1 = PTX,
//! 2 = ELF; header size; padded payload size; PTX ISA version; architecture; flags,
//! where `0x2000` / `0x8000` mark a compressed payload) followed by its payload.

use std::fmt;

/// First four bytes of a fatbin.
pub const MAGIC: u32 = 0xBA55_ED50;
/// Flag bits of a compressed payload (LZ4 and zstd).
const COMPRESSED: u64 = 0x2000 | 0x8000;
/// Flag bit of an arch-specific image (`sm_90a`: runs on compute capability 9.0 only).
const ARCH_SPECIFIC: u64 = 0x10_0000;

/// What an image holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// PTX, JIT-compiled by the driver for any device of at least its architecture.
    Ptx,
    /// A cubin (SASS) for one architecture (and later minors of the same major).
    Sass,
}

/// One image of a fatbin.
#[derive(Debug, Clone, Copy)]
pub struct Image<'a> {
    pub kind: Kind,
    /// The architecture as `10·major + minor` (80 for `sm_80` / `compute_80`).
    pub arch: u32,
    /// An arch-specific image (`sm_90a`), for that exact compute capability only.
    pub arch_specific: bool,
    /// PTX ISA version (major, minor) of a PTX image.
    pub ptx_isa: (u16, u16),
    pub compressed: bool,
    /// The payload as stored (padded with NUL bytes).
    pub payload: &'a [u8],
}

impl Image<'_> {
    /// The PTX text of an uncompressed PTX image.
    pub fn ptx_text(&self) -> Option<&str> {
        if self.kind != Kind::Ptx || self.compressed {
            return None;
        }
        let end = self
            .payload
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.payload.len());
        std::str::from_utf8(&self.payload[..end]).ok()
    }
}

impl fmt::Display for Image<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Sass => write!(
                f,
                "sm_{}{} SASS",
                self.arch,
                if self.arch_specific { "a" } else { "" }
            ),
            Kind::Ptx => write!(
                f,
                "compute_{} PTX (ISA {}.{})",
                self.arch, self.ptx_isa.0, self.ptx_isa.1
            ),
        }
    }
}

/// The images of fatbin `bytes`, in stored order.
pub fn images(bytes: &[u8]) -> Result<Vec<Image<'_>>, String> {
    if bytes.len() < 16 || u32_at(bytes, 0) != MAGIC {
        return Err("not a fatbin (no 0xBA55ED50 magic)".into());
    }
    let header = usize::from(u16_at(bytes, 6));
    let end = header.saturating_add(u64_at(bytes, 8) as usize);
    if end > bytes.len() {
        return Err(format!(
            "fatbin truncated: {end} bytes declared, {} present",
            bytes.len()
        ));
    }
    let mut out = Vec::new();
    let mut at = header;
    while at < end {
        if at + 64 > end {
            return Err(format!("image header at byte {at} runs past the end"));
        }
        let kind = match u16_at(bytes, at) {
            1 => Kind::Ptx,
            2 => Kind::Sass,
            k => return Err(format!("image at byte {at} has unknown kind {k}")),
        };
        let start = at + u32_at(bytes, at + 4) as usize;
        let stop = start.saturating_add(u64_at(bytes, at + 8) as usize);
        if stop > end {
            return Err(format!("image at byte {at} runs past the end"));
        }
        out.push(Image {
            kind,
            arch: u32_at(bytes, at + 28),
            arch_specific: u64_at(bytes, at + 40) & ARCH_SPECIFIC != 0,
            ptx_isa: (u16_at(bytes, at + 26), u16_at(bytes, at + 24)),
            compressed: u64_at(bytes, at + 40) & COMPRESSED != 0,
            payload: &bytes[start..stop],
        });
        at = stop;
    }
    Ok(out)
}

/// "sm_80 SASS, sm_90 SASS, compute_80 PTX (ISA 9.0)": SASS first, by architecture.
pub fn describe(images: &[Image<'_>]) -> String {
    let mut sorted = images.to_vec();
    sorted.sort_by_key(|i| (i.kind == Kind::Ptx, i.arch, i.arch_specific));
    let names: Vec<String> = sorted.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// The `.entry` names of a PTX text, in order.
pub fn ptx_entries(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|l| l.trim_start().strip_prefix(".visible .entry "))
        .filter_map(|l| l.split('(').next())
        .map(str::trim)
        .collect()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fatbin with the given images, laid out as nvcc writes them.
    fn fatbin(images: &[(u16, u32, u64, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(kind, arch, flags, payload) in images {
            let padded = payload.len().div_ceil(8) * 8;
            let mut h = vec![0u8; 64];
            h[0..2].copy_from_slice(&kind.to_le_bytes());
            h[2..4].copy_from_slice(&0x101u16.to_le_bytes());
            h[4..8].copy_from_slice(&64u32.to_le_bytes());
            h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
            h[24..26].copy_from_slice(&0u16.to_le_bytes());
            h[26..28].copy_from_slice(&9u16.to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            h[40..48].copy_from_slice(&flags.to_le_bytes());
            body.extend_from_slice(&h);
            body.extend_from_slice(payload);
            body.resize(body.len() + padded - payload.len(), 0);
        }
        let mut out = MAGIC.to_le_bytes().to_vec();
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn lists_images_and_reads_uncompressed_ptx() {
        let ptx = b".version 9.0\n.visible .entry a_f32(\n.param .u64 p)\n.visible .entry b(\n";
        let bin = fatbin(&[
            (1, 80, 0x11, ptx),
            (2, 80, 0x11, b"\x7fELF"),
            (2, 90, 0x11, b"\x7fELF"),
            // nvcc 13.0's flags of an sm_90a cubin.
            (2, 90, 0x10_0011, b"\x7fELF"),
        ]);
        let imgs = images(&bin).unwrap();
        assert_eq!(
            describe(&imgs),
            "sm_80 SASS, sm_90 SASS, sm_90a SASS, compute_80 PTX (ISA 9.0)"
        );
        assert!(imgs[3].arch_specific && !imgs[2].arch_specific);
        let text = imgs[0].ptx_text().unwrap();
        assert_eq!(ptx_entries(text), ["a_f32", "b"]);
        assert_eq!(imgs[1].ptx_text(), None);
    }

    #[test]
    fn compressed_ptx_has_no_text() {
        let bin = fatbin(&[(1, 80, 0x8011, b"(\xb5/\xfd")]);
        let imgs = images(&bin).unwrap();
        assert!(imgs[0].compressed);
        assert_eq!(imgs[0].ptx_text(), None);
    }

    #[test]
    fn rejects_what_is_not_a_whole_fatbin() {
        assert!(images(b".version 9.0\n.target sm_80").is_err());
        let bin = fatbin(&[(2, 90, 0, b"\x7fELF....")]);
        assert!(images(&bin[..bin.len() - 4])
            .unwrap_err()
            .contains("truncated"));
        let mut bad = bin.clone();
        bad[16] = 7;
        assert!(images(&bad).unwrap_err().contains("unknown kind 7"));
    }
}
