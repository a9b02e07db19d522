"""Type stubs of ``hopscore._native``, the compiled engine under the ``hopscore``
package (use the classes of ``hopscore`` instead of this module)."""

from typing import List, Tuple

import pyarrow as pa

__version__: str

def main(argv: List[str]) -> int:
    """Runs the ``hopscore`` command line ``argv`` (``argv[0]`` is the program name)
    and returns its exit code."""

def set_threads(threads: int) -> None:
    """Sets the CPU worker threads of this process (once, before the first job runs)."""

def options(command: str) -> str:
    """The options of the job ``command`` as JSON: ``{"defaults": {name: default},
    "required": [name]}`` (the device's among them where the job runs a model)."""

class Job:
    """A loaded job ``command`` (``beam``, ``label``, ``lepus``, ``classify``, ``embed``,
    ``loglik``) with ``options``: a JSON object of option names and values."""

    def __init__(self, command: str, options: str) -> None: ...
    def process(self, table: pa.Table) -> Tuple[pa.Table, pa.Table]:
        """(rows, quarantine) tables with the CLI's schemas."""
