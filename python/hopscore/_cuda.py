"""Finds the CUDA libraries of the ``hopscore[cuda]`` extra (PyPI's CUDA 13 wheels) and
loads them into the process, so that the engine's dynamic loading finds them by soname
without ``LD_LIBRARY_PATH``. The NVIDIA driver (``libcuda.so.1``) is never among them:
it comes with the driver install."""

import ctypes
import importlib.util
import os
from typing import List

#: Sonames the engine opens at run time besides the driver, in dependency order
#: (libcublas needs libcublasLt).
LIBRARIES = ("libcublasLt.so.13", "libcublas.so.13")


def wheel_library_dirs() -> List[str]:
    """The ``nvidia/cu13/lib`` folders of installed CUDA 13 wheels."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    dirs = [os.path.join(p, "cu13", "lib") for p in spec.submodule_search_locations]
    return [d for d in dirs if os.path.isdir(d)]


def preload() -> List[str]:
    """Loads each library of :data:`LIBRARIES` found in :func:`wheel_library_dirs`
    with ``RTLD_GLOBAL``; returns the paths loaded. A library not found is left to the
    system's search path (the engine then names what is missing when a CUDA device is
    opened)."""
    loaded = []
    dirs = wheel_library_dirs()
    for name in LIBRARIES:
        for d in dirs:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                loaded.append(path)
                break
    return loaded
