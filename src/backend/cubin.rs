//! The machine code of each kernel entry in a cubin (the ELF64 file of one SASS image
//! of a fatbin): the bytes of its `.text.<entry>` section. build.rs hashes them into
//! the binary's table of shipped SASS ([`kernels::KERNEL_SASS`](super::kernels)), which
//! the provenance records of kernels/proven.tsv are matched against; a change to a
//! kernel's source, its headers or the compiler that changes its instructions changes
//! its hash, and a change elsewhere in the same file does not. std only: build.rs
//! includes this file (`#[path]`), as tools/gpu/sass_hashes.py mirrors it.

/// ELF section type of a section without bytes in the file (`.bss`-like).
const SHT_NOBITS: u32 = 8;

/// `(entry, machine code)` of every `.text.<entry>` section of cubin `elf`, in section
/// order.
pub fn entry_texts(elf: &[u8]) -> Result<Vec<(&str, &[u8])>, String> {
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 {
        return Err("not an ELF64 cubin".into());
    }
    let shoff = u64_at(elf, 0x28)? as usize;
    let entsize = usize::from(u16_at(elf, 0x3A)?);
    let count = usize::from(u16_at(elf, 0x3C)?);
    let names_index = usize::from(u16_at(elf, 0x3E)?);
    let header = |i: usize| -> Result<(u32, u32, usize, usize), String> {
        let at = shoff + i * entsize;
        let size = u64_at(elf, at + 0x20)? as usize;
        Ok((
            u32_at(elf, at)?,
            u32_at(elf, at + 4)?,
            u64_at(elf, at + 0x18)? as usize,
            size,
        ))
    };
    let (_, _, names_at, names_len) = header(names_index)?;
    let names = elf
        .get(names_at..names_at + names_len)
        .ok_or("the section name table runs past the end")?;
    let mut out = Vec::new();
    for i in 0..count {
        let (name_at, kind, offset, size) = header(i)?;
        let name = names
            .get(name_at as usize..)
            .and_then(|n| n.split(|&b| b == 0).next())
            .and_then(|n| std::str::from_utf8(n).ok())
            .ok_or_else(|| format!("section {i} has no readable name"))?;
        let Some(entry) = name.strip_prefix(".text.") else {
            continue;
        };
        if kind == SHT_NOBITS {
            continue;
        }
        let text = elf
            .get(offset..offset + size)
            .ok_or_else(|| format!("section {name} runs past the end"))?;
        out.push((entry, text));
    }
    Ok(out)
}

fn bytes<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], String> {
    b.get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("the ELF header is cut at byte {at}"))
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, String> {
    bytes(b, at).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    bytes(b, at).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    bytes(b, at).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 file with the named sections (one per `(name, type, bytes)`), the
    /// name table last, laid out as ptxas writes one.
    fn elf(sections: &[(&str, u32, &[u8])]) -> Vec<u8> {
        let mut names = vec![0u8];
        let mut body = Vec::new();
        let mut headers = vec![[0u8; 64]];
        let mut push = |name: &str, kind: u32, data: &[u8], names: &mut Vec<u8>| {
            let mut h = [0u8; 64];
            h[0..4].copy_from_slice(&(names.len() as u32).to_le_bytes());
            names.extend_from_slice(name.as_bytes());
            names.push(0);
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(64 + body.len() as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(data.len() as u64).to_le_bytes());
            body.extend_from_slice(data);
            headers.push(h);
        };
        for &(name, kind, data) in sections {
            push(name, kind, data, &mut names);
        }
        let table_name = names.len() as u32;
        names.extend_from_slice(b".shstrtab\0");
        let mut h = [0u8; 64];
        h[0..4].copy_from_slice(&table_name.to_le_bytes());
        h[4..8].copy_from_slice(&3u32.to_le_bytes());
        h[0x18..0x20].copy_from_slice(&(64 + body.len() as u64).to_le_bytes());
        h[0x20..0x28].copy_from_slice(&(names.len() as u64).to_le_bytes());
        body.extend_from_slice(&names);
        headers.push(h);
        let mut out = vec![0u8; 64];
        out[..5].copy_from_slice(b"\x7fELF\x02");
        let shoff = 64 + body.len() as u64;
        out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        out[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        out[0x3C..0x3E].copy_from_slice(&(headers.len() as u16).to_le_bytes());
        out[0x3E..0x40].copy_from_slice(&(headers.len() as u16 - 1).to_le_bytes());
        out.extend_from_slice(&body);
        for h in headers {
            out.extend_from_slice(&h);
        }
        out
    }

    #[test]
    fn reads_each_entry_text_and_skips_the_rest() {
        let bin = elf(&[
            (".nv.info.a_f32", 0x7000_0000, b"info"),
            (".text.a_f32", 1, b"\x01\x02\x03\x04"),
            (".nv.shared.a_f32", SHT_NOBITS, b""),
            (".text.b", 1, b"\x05\x06"),
            (".text.c", SHT_NOBITS, b""),
        ]);
        let texts = entry_texts(&bin).unwrap();
        assert_eq!(
            texts,
            [("a_f32", &b"\x01\x02\x03\x04"[..]), ("b", &b"\x05\x06"[..])]
        );
    }

    #[test]
    fn refuses_what_is_not_a_whole_cubin() {
        assert!(entry_texts(b"\x7fELF\x01").is_err());
        let bin = elf(&[(".text.a", 1, b"\x01\x02")]);
        assert!(entry_texts(&bin[..bin.len() - 40])
            .unwrap_err()
            .contains("cut at byte"));
    }
}
