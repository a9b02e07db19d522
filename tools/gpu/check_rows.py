"""Checks that every row of a kit run names the card it ran on.

    python3 tools/gpu/check_rows.py RESULTS_DIR --card "NVIDIA H200"

Reads every JSON line of RESULTS_DIR/*.jsonl. A row that measures an engine (it has
`engine`) or says where it ran (it has `device`) must carry `device` as
tools/bench_device.py writes it: `cuda:N (CARD…)` with this card's name in it, or
`cpu (PROCESSOR)` for the peers that ran on the CPU (the emulator dry run, ONNX Runtime,
llama.cpp). A bare `cuda` or another card is an error: two cards' rows must never read
alike. Exit status 1 names each bad row (file, line, engine, device); 0 prints the
count of rows checked.
"""

import argparse
import json
import re
import sys
from pathlib import Path

CUDA = re.compile(r"^cuda:\d+ \((?P<card>.+)\)$")
CPU = re.compile(r"^cpu \(.+\)$")


def problems(row: dict, card: str) -> str | None:
    """Why `row` does not name where it ran, or None."""
    device = row.get("device")
    if device is None:
        return "no device field"
    if not isinstance(device, str):
        return f"device {device!r} is not a string"
    if CPU.match(device):
        return None
    m = CUDA.match(device)
    if not m:
        return f"device {device!r} names no card (want 'cuda:N (card)' or 'cpu (processor)')"
    if card not in m.group("card"):
        return f"device {device!r} is not the card {card!r}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="the kit's results directory (its *.jsonl files)")
    ap.add_argument("--card", required=True, help="the card's name as nvidia-smi gives it")
    args = ap.parse_args()
    bad, checked = [], 0
    for path in sorted(args.results.glob("*.jsonl")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                bad.append(f"{path.name}:{n}: not JSON ({e})")
                continue
            if "engine" not in row and "device" not in row:
                continue
            checked += 1
            why = problems(row, args.card)
            if why:
                bad.append(f"{path.name}:{n}: {row.get('engine') or row.get('variant') or '?'}: {why}")
    for b in bad:
        print(b)
    if bad:
        print(f"check_rows: {len(bad)} of {checked} rows do not name the card {args.card!r}")
        return 1
    print(f"check_rows: {checked} rows name their device ({args.card!r} for the GPU's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
