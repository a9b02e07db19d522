"""The ``hopscore`` console script: the same command line as the Rust binary."""

import sys

from hopscore import _native


def main() -> None:
    """Runs ``hopscore`` with this process's arguments and exits with its code."""
    sys.exit(_native.main(["hopscore", *sys.argv[1:]]))


if __name__ == "__main__":  # the GPU self-test's children: python -m hopscore._cli doctor --case ...
    main()
