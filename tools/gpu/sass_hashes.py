#!/usr/bin/env python3
"""The SASS hash of every kernel entry in fatbins, as build.rs computes it for the
binary's own kernels (src/backend/cubin.rs): per SASS image (sm_80, sm_90, sm_90a) of
each fatbin, the SHA-256 of each entry's `.text.<entry>` section of the cubin (the
machine code itself, nothing the linker or a path adds).

Used to turn a kit built at an older commit into provenance records
(kernels/proven.tsv): build that commit's kernels with the same nvcc
(`tools/gpu/old_kernels.sh COMMIT DIR`), then

    python3 tools/gpu/sass_hashes.py DIR/*.fatbin

prints `entry<TAB>arch<TAB>sha256` lines. Standard library only.
"""

import hashlib
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
ARCH_SPECIFIC = 0x10_0000
COMPRESSED = 0x2000 | 0x8000


def images(data):
    """(arch name, cubin bytes) of each uncompressed SASS image (as src/backend/fatbin.rs)."""
    magic, _, header, size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        raise ValueError("not a fatbin")
    at, end = header, header + size
    while at < end:
        kind, _, hsize, psize = struct.unpack_from("<HHIQ", data, at)
        arch = struct.unpack_from("<I", data, at + 28)[0]
        flags = struct.unpack_from("<Q", data, at + 40)[0]
        start = at + hsize
        if kind == 2:
            if flags & COMPRESSED:
                raise ValueError("compressed cubin: build with --no-compress")
            suffix = "a" if flags & ARCH_SPECIFIC else ""
            yield f"sm_{arch}{suffix}", data[start : start + psize]
        at = start + psize


def entry_texts(elf):
    """(entry, bytes of .text.<entry>) of an ELF64 cubin."""
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_off = sections[shstrndx][4]
    for name_at, kind, _, _, offset, size in sections:
        end = elf.index(b"\0", names_off + name_at)
        name = elf[names_off + name_at : end].decode()
        if name.startswith(".text.") and kind != 8:  # 8: SHT_NOBITS
            yield name[len(".text.") :], elf[offset : offset + size]


def main(paths):
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        for arch, elf in images(data):
            for entry, text in entry_texts(elf):
                print(f"{entry}\t{arch}\t{hashlib.sha256(text).hexdigest()}")


if __name__ == "__main__":
    main(sys.argv[1:])
