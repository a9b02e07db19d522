#!/usr/bin/env python3
"""Static SASS report of every kernel entry in kernels/*.cu and kernels/cutlass/*.cu (issue 14).

Each kernel file is compiled for sm_90 (or the arch its `// hopscore-sass:` line names,
sm_90a for the wgmma kernel) with the pinned nvcc (`-cubin`, `-Xptxas -v`),
then read with `cuobjdump -sass` and `-res-usage` (PyPI nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm 13.2.51 read nvcc 13.0 cubins). For every entry (one per dtype)
it reports registers, spill bytes, static + dynamic shared memory, resident blocks per
SM, and instruction counts (HMMA, HGMMA, LDSM, LDS, STS, LDG, LDGSTS, generic LD/ST,
BAR, SHFL, total) for the whole kernel and for its main loop.

Loops are found from backward branches (a BRA to a lower address closes the loop
[target, branch]). The main loop is the smallest loop holding the most tensor-core
(HMMA or HGMMA) instructions (for attention, the key-tile loop: its products are unrolled into
it or nested in it); without HMMA, the innermost loop with the most instructions.
Counts are static (instructions in the code, nested loops included), not executed
ones.

Entries that claim the v3 targets (CLAIMS below) must meet them, or the report exits
with status 1 (CI fails): no generic loads or stores (bf16/f16), no spills, and for the
attentions at least one HMMA per 8 instructions of the main loop; the warp-specialised
TMA kernels (TMA_CLAIMS) TMA loads, mbarrier operations, HGMMA in the main loop, no
spills and the register count their setmaxnreg assumes; at most one wgmma wait
(WARPGROUP.DEPBAR) per two HGMMA in the main loop (ptxas serialises the chains, a wait
after each, when it cannot prove them safe, and says so only in a -v info line), and no
such info line (C751x/C7520: "wgmma.mma_async instructions are serialized") naming it. The vectorised
elementwise, norm and head kernels (VECTOR_CLAIMS) must have a 16-byte global load
(LDG.E.128) in a loop (their vector loops sit beside element-by-element fallbacks, so
"main loop" may name either); LDG.128 and STG.128 count those loads and stores. The
warp-per-row norms (REGISTER_ROW_CLAIMS) hold the row in registers: every global load
a 16-byte one, no shared memory, no barrier, no spills. The CUTLASS GEMMs
(kernels/cutlass/, compiled with CUTLASS's headers as build.rs does: --cutlass, else the
nvidia-cutlass wheel beside nvcc) are TMA kernels too.

Usage: tools/sass_report.py --nvcc PATH --cuobjdump PATH [--kernel-dir kernels]
       [--cutlass DIR] [--markdown FILE] [--built OUT_DIR]

With --built (as .ci/run calls it) the report reads the fatbins the build made and
build.rs's ptxas -v logs beside them, so it describes the SASS that ships and compiles
nothing; without it, each file is compiled here for its arch.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ARCH = "sm_90"
# H100 (sm_90) per-SM limits for the occupancy estimate.
SM_REGS = 65536
SM_THREADS = 2048
SM_BLOCKS = 32
SM_SMEM = 233472  # 228 KiB
BLOCK_RESERVED_SMEM = 1024  # per block, reserved by the system on sm_80+
REG_UNIT = 256  # registers are allocated per warp in units of 256

# Launch geometry of each kernel: entry-name prefix → (threads per block, dynamic shared
# memory in bytes), as expressions over kernels/geometry.cuh (the numbers the kernels
# and the launchers in src/backend/cuda/ use), at head dim 64 (instances for 128: at
# 128), with the position band, and hidden size 768; the longest matching prefix wins,
# other entries get ROW_THREADS and no dynamic shared memory.
GEOMETRY = {
    "disentangled_attention_f32": ("ATTENTION_THREADS", "disentangled_v1_smem(64, 1)"),
    "disentangled_attention_v3_d64": ("ATTENTION_THREADS", "disentangled_v3_smem(64, 1)"),
    "disentangled_attention_v3_d128": ("ATTENTION_THREADS", "disentangled_v3_smem(128, 1)"),
    "causal_attention_f32": ("ATTENTION_THREADS", "causal_v1_smem(64)"),
    "causal_attention_fma": ("ATTENTION_THREADS", "causal_v1_smem(64)"),
    "causal_attention_v3_d64": ("ATTENTION_THREADS", "causal_v3_smem(64)"),
    "causal_attention_v3_d128": ("ATTENTION_THREADS", "causal_v3_smem(128)"),
    "t5_attention": ("ATTENTION_THREADS", "t5_smem(64)"),
    "t5_attention_v3_d64": ("ATTENTION_THREADS", "t5_v3_smem(64)"),
    "t5_attention_v3_d128": ("ATTENTION_THREADS", "t5_v3_smem(128)"),
    "question_loglik": ("LOGLIK_THREADS", "0"),
    "question_loglik_bf16": ("LOGLIK_THREADS", "LOGLIK_TC_SMEM"),
    "question_loglik_f16": ("LOGLIK_THREADS", "LOGLIK_TC_SMEM"),
    "question_loglik_merge": ("LOGLIK_MERGE_THREADS", "0"),
    "layer_norm": ("ROW_THREADS", "layer_norm_smem(768)"),
    "layer_norm_rows": ("NORM_ROWS * 32", "0"),
    "rms_norm": ("ROW_THREADS", "0"),
    "rms_norm_rows": ("NORM_ROWS * 32", "0"),
    "rope": ("ROPE_ROWS * 32", "0"),
    "tensor_core_check": ("TENSOR_CORE_CHECK_THREADS", "0"),
    "wgmma_check": ("TENSOR_CORE_CHECK_THREADS", "WGMMA_CHECK_SMEM"),
    "tma_check": ("TMA_CHECK_THREADS", "TMA_CHECK_SMEM"),
    "disentangled_attention_v5": ("DA_V5_THREADS", "DA_V5_SMEM"),
    # CUTLASS's ping-pong GEMM: a producer and two consumer warpgroups; its dynamic
    # shared memory (CUTLASS's SharedStorage) is the launcher's figure, not listed here.
    "gemm_bias_gelu": ("384", "0"),
    "gemm_gated": ("384", "0"),
    "gemm_add_norm": ("384", "0"),
    "cls_head": ("HEAD_THREADS", "head_smem(768 + HEAD_POOLER_CHUNK)"),
    "token_head": ("HEAD_THREADS", "head_smem(768 + 2)"),  # 2 labels
}
DEFAULT_GEOMETRY = ("ROW_THREADS", "0")


def load_geometry(path):
    """The constants and formulas of kernels/geometry.cuh, by name (the one-line forms
    its header comment allows; C++ integer division becomes //)."""
    names = {}
    const = re.compile(r"constexpr unsigned (\w+) = (.+);")
    func = re.compile(r"constexpr unsigned (\w+)\(([^)]*)\) \{ return (.+); \}")
    with open(path) as f:
        for line in f:
            line = line.split("//")[0].strip()
            if not line.startswith("constexpr unsigned "):
                continue
            m = func.fullmatch(line)
            if m:
                params = ", ".join(p.split()[-1] for p in m.group(2).split(","))
                names[m.group(1)] = eval(f"lambda {params}: {m.group(3).replace('/', '//')}", names)
                continue
            m = const.fullmatch(line)
            if not m:
                sys.exit(f"sass_report: {path}: not of a form the report reads: {line}")
            names[m.group(1)] = eval(m.group(2).replace("/", "//"), names)
    return names

# Entries that claim the static targets (regular expressions on the entry name), with
# the largest number of main-loop instructions per HMMA they may have (None: no
# main-loop target, only no generic loads/stores and no spills).
CLAIMS = [
    (r"^disentangled_attention_v3_", 8),
    (r"^causal_attention_v3_", 8),
    # T5's key tile also starts S from the staged bucket bias (18 shared loads a lane)
    # or zeros (cross-attention): 558 instructions for 64 HMMA at d 64.
    (r"^t5_attention_v3_", 9),
    (r"^question_loglik_(bf16|f16)$", None),
]

# Warp-specialised TMA entries (kernels/tma.cuh): TMA loads (UTMALDG) and mbarrier
# operations (SYNCS), HGMMA in the main loop, no spills, no generic loads or stores, and
# the register count setmaxnreg's arithmetic assumes: 65536 / threads (rounded down to 8).
TMA_CLAIMS = [r"^tma_check_", r"^disentangled_attention_v5_", r"^gemm_bias_gelu_", r"^gemm_gated_", r"^gemm_add_norm_"]

# Entries that must move global memory by 16-byte vectors (LDG.E.128) in a loop.
VECTOR_CLAIMS = [
    r"^(gelu|gelu_new|add|gather_rows|gated_silu|gated_gelu_new|relu|layer_norm|rms_norm|cls_head|token_head)_(f32|bf16|f16)$",
]

# Warp-per-row norms: the row in registers, so every global load is a 16-byte one, with
# no shared memory, no barrier and no spills.
REGISTER_ROW_CLAIMS = [r"^(layer_norm|rms_norm)_rows\d_(f32|bf16|f16)$"]

COLUMNS = ["HMMA", "HGMMA", "UTMALDG", "SYNCS", "LDSM", "LDS", "STS", "LDG", "LDG.128", "STG.128", "LDGSTS", "LD", "ST",
           "BAR", "SHFL", "total"]


def category(op):
    """The report column of a SASS opcode (None: counted in `total` only)."""
    base = op.split(".")[0]
    if base in ("HMMA", "HGMMA", "UTMALDG", "SYNCS", "LDSM", "LDS", "STS", "LDG", "LDGSTS", "BAR", "SHFL", "LD", "ST"):
        return base
    return None


INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
TARGET = re.compile(r"0x([0-9a-f]+)\s*$")


def parse_sass(text):
    """{function: [(address, opcode, operands)]} from `cuobjdump -sass`."""
    funcs, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^\s*Function : (\S+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = INSN.match(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2), m.group(3).strip()))
    return funcs


def counts(insns):
    """COLUMNS, plus "DEPBAR": waits for wgmma groups (WARPGROUP.DEPBAR), one per HGMMA
    when ptxas serialises a kernel's wgmma (its -v info C7520)."""
    c = dict.fromkeys(COLUMNS, 0)
    c["DEPBAR"] = 0
    for _, op, _ in insns:
        if op == "NOP":
            continue
        c["total"] += 1
        col = category(op)
        if col:
            c[col] += 1
        if op.split(".")[0] in ("LDG", "STG") and op.endswith(".128"):
            c[op.split(".")[0] + ".128"] += 1
        if op.startswith("WARPGROUP.DEPBAR"):
            c["DEPBAR"] += 1
    return c


def find_loops(insns):
    """[(first address, last address)] of every loop (a backward branch closes one)."""
    loops = []
    for addr, op, rest in insns:
        if op.split(".")[0] != "BRA":
            continue
        m = TARGET.search(rest)
        if m and int(m.group(1), 16) < addr:
            loops.append((int(m.group(1), 16), addr))
    return loops


def vector_loop(insns):
    """Whether some loop moves global memory by a 16-byte load (LDG.E.128)."""
    return any(
        counts([i for i in insns if lo <= i[0] <= hi])["LDG.128"] > 0 for lo, hi in find_loops(insns)
    )


def main_loop(insns):
    """(first address, last address) of the main loop, or None."""
    loops = find_loops(insns)
    if not loops:
        return None

    def inside(lo, hi):
        return [i for i in insns if lo <= i[0] <= hi]

    def contains(outer, inner):
        return outer != inner and outer[0] <= inner[0] and inner[1] <= outer[1]

    hmma = {l: (lambda c: c["HMMA"] + c["HGMMA"])(counts(inside(*l))) for l in loops}
    if max(hmma.values()) > 0:
        return max(loops, key=lambda l: (hmma[l], -(l[1] - l[0])))
    innermost = [l for l in loops if not any(contains(l, o) for o in loops)]
    return max(innermost, key=lambda l: l[1] - l[0])


def ptxas_info(stderr, arch=None):
    """{function: [registers, spill store bytes, spill load bytes, static smem, wgmma
    serialised]}: the last is ptxas's own word (infos C7510–C7520, "wgmma.mma_async
    instructions are serialized due to …") that the chains of a function wait one by one.
    With `arch`, only that arch's entries (a fatbin's log reports each of its archs)."""
    info, cur = {}, None
    for line in stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(\S+)'", line)
        if m and arch and m.group(2) != arch:
            cur = None
            continue
        m = re.search(r"wgmma\.mma_async instructions are serialized .* function '(\S+)'", line)
        if m:
            info.setdefault(m.group(1), [0, 0, 0, 0, False])[4] = True
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m and (cur or not arch):
            cur = m.group(1)
            info.setdefault(cur, [0, 0, 0, 0, False])
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            info[cur][1], info[cur][2] = int(m.group(1)), int(m.group(2))
            continue
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
            info.setdefault(cur, [0, 0, 0, 0, False])
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            info[cur][0] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            info[cur][3] = int(s.group(1)) if s else 0
    return info


def geometry(name, names):
    """(threads, dynamic shared memory) of entry `name`."""
    best = ("", DEFAULT_GEOMETRY)
    for prefix, g in GEOMETRY.items():
        if name.startswith(prefix) and len(prefix) > len(best[0]):
            best = (prefix, g)
    threads, smem = best[1]
    return eval(threads, names), eval(smem, names)


def blocks_per_sm(regs, threads, smem):
    warps = (threads + 31) // 32
    per_warp = -(-max(regs, 1) * 32 // REG_UNIT) * REG_UNIT
    by_regs = (SM_REGS // per_warp) // warps
    by_threads = SM_THREADS // threads
    by_smem = SM_SMEM // (smem + BLOCK_RESERVED_SMEM)
    return min(by_regs, by_threads, by_smem, SM_BLOCKS)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sass_report: {' '.join(cmd)} failed:\n{r.stderr}")
    return r


def file_arch(src):
    """The arch a kernel file is reported for: its `// hopscore-sass:` line's, or ARCH."""
    with open(src) as f:
        for line in f:
            if line.strip().startswith("// hopscore-sass:"):
                return line.split(":", 1)[1].split(",")[0].strip()
    return ARCH


def cutlass_flags(cutlass):
    """nvcc's flags for a file that includes CUTLASS (build.rs's cutlass_flags)."""
    return ["--expt-relaxed-constexpr", "-DNDEBUG", "-I" + os.path.join(cutlass, "include"),
            "-I" + os.path.join(cutlass, "tools", "util", "include")]


def report_file(src, nvcc, cuobjdump, tmp, names, extra=(), built=None):
    """The rows of `src`'s entries: from the build's `<stem>.fatbin` and its ptxas log in
    `built` (what ships), else compiled here."""
    arch = file_arch(src)
    if built:
        fatbin = os.path.join(built, os.path.splitext(os.path.basename(src))[0] + ".fatbin")
        with open(fatbin + ".log") as f:
            info = ptxas_info(f.read(), arch)
        sass = parse_sass(run([cuobjdump, "-sass", "-arch", arch, fatbin]).stdout)
    else:
        cubin = os.path.join(tmp, os.path.basename(src) + ".cubin")
        include = "-I" + os.path.dirname(src)
        r = run([nvcc, "-cubin", "-O3", "-std=c++17", f"-arch={arch}", include, *extra, "-Xptxas", "-v", src,
                 "-o", cubin])
        info = ptxas_info(r.stderr)
        sass = parse_sass(run([cuobjdump, "-sass", cubin]).stdout)
    rows = []
    for name in sorted(sass):
        insns = sass[name]
        regs, spill_st, spill_ld, smem, serialised = info.get(name, [0, 0, 0, 0, False])
        threads, dyn = geometry(name, names)
        loop = main_loop(insns)
        inner = counts([i for i in insns if loop and loop[0] <= i[0] <= loop[1]])
        rows.append(
            {
                "name": name,
                "regs": regs,
                "spills": spill_st + spill_ld,
                "serialised": serialised,
                "smem": smem,
                "dyn": dyn,
                "threads": threads,
                "blocks": blocks_per_sm(regs, threads, smem + dyn),
                "all": counts(insns),
                "loop": inner if loop else None,
                "vector_loop": vector_loop(insns),
            }
        )
    return rows


def check_claims(rows):
    failures = []
    for row in rows:
        for pattern, every in CLAIMS:
            if not re.search(pattern, row["name"]):
                continue
            a, lp = row["all"], row["loop"]
            if row["name"].endswith(("_bf16", "_f16")) and a["LD"] + a["ST"] > 0:
                failures.append(f"{row['name']}: {a['LD']} generic loads, {a['ST']} generic stores")
            if row["spills"]:
                failures.append(f"{row['name']}: {row['spills']} bytes of spills")
            if every is None:
                continue
            if lp is None or lp["HMMA"] == 0 or lp["total"] > every * lp["HMMA"]:
                got = f"{lp['HMMA']} HMMA in {lp['total']}" if lp else "no loop"
                failures.append(f"{row['name']}: main loop has {got} instructions (target ≥ 1 per {every})")
    for row in rows:
        if any(re.search(p, row["name"]) for p in TMA_CLAIMS):
            lp = row["loop"]
            if lp and lp["HGMMA"] and 2 * lp["DEPBAR"] > lp["HGMMA"]:
                failures.append(f"{row['name']}: {lp['DEPBAR']} waits for {lp['HGMMA']} HGMMA in the main loop "
                                "(ptxas serialised the wgmma chains)")
            if row["serialised"]:
                failures.append(f"{row['name']}: ptxas -v says its wgmma are serialized (info C751x/C7520)")
        if any(re.search(p, row["name"]) for p in TMA_CLAIMS):
            a, lp = row["all"], row["loop"]
            pool = min(255, SM_REGS // row["threads"]) // 8 * 8
            if a["UTMALDG"] == 0 or a["SYNCS"] == 0 or lp is None or lp["HGMMA"] == 0:
                failures.append(f"{row['name']}: {a['UTMALDG']} UTMALDG, {a['SYNCS']} SYNCS, no HGMMA loop" if lp is None
                                else f"{row['name']}: {a['UTMALDG']} UTMALDG, {a['SYNCS']} SYNCS, {lp['HGMMA']} HGMMA in its main loop")
            if a["LD"] + a["ST"] > 0 or row["spills"] or row["regs"] != pool:
                failures.append(f"{row['name']}: {a['LD'] + a['ST']} generic loads/stores, {row['spills']} B spills, "
                                f"{row['regs']} registers (setmaxnreg assumes {pool})")
        if any(re.search(p, row["name"]) for p in VECTOR_CLAIMS):
            if not row["vector_loop"]:
                failures.append(f"{row['name']}: no loop with an LDG.E.128")
        if any(re.search(p, row["name"]) for p in REGISTER_ROW_CLAIMS):
            a = row["all"]
            if a["LDG"] != a["LDG.128"] or a["LDS"] + a["STS"] + a["BAR"] > 0 or row["spills"]:
                failures.append(
                    f"{row['name']}: {a['LDG.128']} of {a['LDG']} global loads by 16 bytes, "
                    f"{a['LDS'] + a['STS']} shared accesses, {a['BAR']} barriers, {row['spills']} B spills"
                )
    return failures


def markdown(rows):
    head = (
        "| entry | regs | spill B | smem static + dyn | threads | blocks/SM | "
        + " | ".join(COLUMNS)
        + " | main loop: "
        + " / ".join(COLUMNS)
        + " |"
    )
    lines = [head, "|" + "---|" * (7 + len(COLUMNS)) + "---|"]
    for r in rows:
        a = " | ".join(str(r["all"][c]) for c in COLUMNS)
        lp = " / ".join(str(r["loop"][c]) for c in COLUMNS) if r["loop"] else "—"
        lines.append(
            f"| `{r['name']}` | {r['regs']} | {r['spills']} | {r['smem']} + {r['dyn']} | "
            f"{r['threads']} | {r['blocks']} | {a} | {lp} |"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--cuobjdump", required=True)
    ap.add_argument("--kernel-dir", default="kernels")
    ap.add_argument("--cutlass", help="CUTLASS's source folder (include/, tools/util/include/); default: "
                    "$HOPSCORE_CUTLASS, else the nvidia-cutlass wheel in nvcc's site-packages")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--only", help="regular expression: report these kernel files only")
    ap.add_argument("--built", help="the build's kernel folder ($OUT_DIR: <stem>.fatbin and <stem>.fatbin.log, "
                    "ptxas -v's report): read the SASS that ships instead of compiling every file again")
    args = ap.parse_args()
    # cuobjdump -sass runs nvdisasm from PATH.
    os.environ["PATH"] = os.path.dirname(os.path.abspath(args.cuobjdump)) + os.pathsep + os.environ["PATH"]
    def sources(d):
        return sorted(
            os.path.join(d, f)
            for f in os.listdir(d)
            if f.endswith(".cu") and not f.endswith("_host.cu") and (not args.only or re.search(args.only, f))
        )

    cutlass = args.cutlass or os.environ.get("HOPSCORE_CUTLASS") or os.path.join(
        os.path.dirname(os.path.abspath(args.nvcc)), "..", "..", "..", "cutlass_library", "source")
    cutlass_dir = os.path.join(args.kernel_dir, "cutlass")
    cutlass_srcs = sources(cutlass_dir) if os.path.isdir(cutlass_dir) else []
    if cutlass_srcs and not os.path.exists(os.path.join(cutlass, "include", "cutlass", "cutlass.h")):
        sys.exit(f"sass_report: no CUTLASS headers at {cutlass} (--cutlass DIR; tools/nvcc.sh installs them)")
    names = load_geometry(os.path.join(args.kernel_dir, "geometry.cuh"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for src in sources(args.kernel_dir):
            rows.extend(report_file(src, args.nvcc, args.cuobjdump, tmp, names, built=args.built))
        for src in cutlass_srcs:
            rows.extend(report_file(src, args.nvcc, args.cuobjdump, tmp, names, cutlass_flags(cutlass), args.built))
    table = markdown(rows)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    failures = check_claims(rows)
    claimed = sum(1 for r in rows if any(re.search(p, r["name"]) for p, _ in CLAIMS))
    claimed += sum(
        1 for r in rows if any(re.search(p, r["name"]) for p in TMA_CLAIMS + VECTOR_CLAIMS + REGISTER_ROW_CLAIMS)
    )
    for f in failures:
        print(f"sass_report: TARGET MISSED: {f}", file=sys.stderr)
    print(
        f"sass_report: {len(rows)} entries, {claimed} claiming targets (v3, wgmma, TMA, vector or register rows), "
        f"{len(failures)} misses",
        file=sys.stderr,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
