#!/usr/bin/env python3
"""Requantises a GGUF file with llama.cpp's own quantiser (llama-cpp-python's
``llama_model_quantize``), to compare hopscore and llama.cpp on other block types
than the Q4_1 of SmolLM2's file (tools/bench_decoder_reference.py --gguf OUT).

    .venv/bin/python tools/requantize_gguf.py weights/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \\
        /tmp/smollm2-q4_k_m.gguf --type Q4_K_M

Requantising from Q4_1 compounds the roundings (the source has no f32 weights left):
the result is a file of the chosen types to time and to compare engines on, not a
better model.
"""

import argparse
import sys


def main(argv=None) -> int:
    import llama_cpp as lc

    types = {
        name[len("LLAMA_FTYPE_MOSTLY_"):]: getattr(lc, name)
        for name in dir(lc)
        if name.startswith("LLAMA_FTYPE_MOSTLY_")
    }
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--type", default="Q4_K_M", choices=sorted(types))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    params = lc.llama_model_quantize_default_params()
    params.ftype = types[args.type]
    params.nthread = args.threads
    params.allow_requantize = True
    rc = lc.llama_model_quantize(args.source.encode(), args.out.encode(), params)
    if rc != 0:
        print(f"llama_model_quantize failed ({rc})", file=sys.stderr)
        return 1
    print(f"wrote {args.out} ({args.type})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
