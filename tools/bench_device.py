"""The `device` of a benchmark row: where it ran, naming the card or the processor.

`cuda:0 (NVIDIA H200)` or `cpu (AMD EPYC 7763 64-Core Processor)`, never a bare `cuda`,
so that rows of two cards never read alike (tools/gpu/check_rows.py holds the kit's
rows to it). The hopscore binary names its own device in its JSON (`cuda:0 (NVIDIA
H200, bf16)`); `hopscore_label` is for the rows a script writes about a hopscore run
from outside (timed jobs, failures).
"""

import os
import platform


def cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_label() -> str:
    return f"cpu ({cpu_name()})"


def torch_label(torch, device) -> str:
    """Where PyTorch ran a peer: `device` is a torch.device or its string."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return cpu_label()


def hopscore_label(kind: str, gpu: int = 0) -> str:
    """Where a hopscore run with `--device kind --gpu gpu` ran: the card as PyTorch sees
    it, else `HOPSCORE_KIT_CARD` (the kit sets it: nvidia-smi's name, or the emulator's
    in a dry run, where PyTorch runs on the CPU)."""
    if kind != "cuda":
        return cpu_label()
    card = os.environ.get("HOPSCORE_KIT_CARD")
    if not card:
        try:
            import torch

            card = torch.cuda.get_device_name(gpu) if torch.cuda.is_available() else None
        except ImportError:
            card = None
    return f"cuda:{gpu} ({card or 'card unknown'})"
