#!/usr/bin/env python3
"""Copy a GGUF file's metadata (config and tokenizer) without its tensors.

    python3 tools/gpu/gguf_metadata.py weights/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf out.gguf

The copy is a valid GGUF with zero tensors: transformers reads the tokenizer and config
from it (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``), so a GPU machine can
tokenise exactly as with the 98 MB original while carrying about 2 MB. Standard library
only: the key/value section is parsed just far enough to find where it ends and copied
byte for byte.
"""

import struct
import sys

# GGUF value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
# 9 array, 10 u64, 11 i64, 12 f64.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(buf, pos, vtype):
    """Position after one value of `vtype` starting at `pos`."""
    if vtype in FIXED:
        return pos + FIXED[vtype]
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == 9:
        sub, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if sub in FIXED:
            return pos + FIXED[sub] * count
        for _ in range(count):
            pos = skip_value(buf, pos, sub)
        return pos
    raise ValueError(f"unknown GGUF value type {vtype} at byte {pos}")


def metadata_only(src: bytes) -> bytes:
    magic, version, _tensors, n_kv = struct.unpack_from("<4sIQQ", src, 0)
    if magic != b"GGUF" or version < 2:
        raise ValueError(f"not a GGUF v2+ file (magic {magic!r}, version {version})")
    pos = 24
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", src, pos)
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", src, pos)
        pos = skip_value(src, pos + 4, vtype)
    return struct.pack("<4sIQQ", magic, version, 0, n_kv) + src[24:pos]


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        out = metadata_only(f.read())
    with open(sys.argv[2], "wb") as f:
        f.write(out)
    print(f"{sys.argv[2]}: {len(out)} bytes of metadata")
    return 0


if __name__ == "__main__":
    sys.exit(main())
