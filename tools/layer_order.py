#!/usr/bin/env python3
"""Fails when an import in src/ runs against the layer order of docs/architecture.md.

    python3 tools/layer_order.py

The order is the one line of the "Layers" section's code block
(`backend ◄─ io ◄─ … ◄─ cli`): a layer may import only the layers before it, never one
after it or one of its own rank (`strategy, post, metrics`). `tensor`, `quant` and
`stop` are leaves every layer may use. A layer is `src/<name>/` with `src/<name>.rs`;
tests (from a file's first `#[cfg(test)]` on) and comments are left out, as the document
says. Prints each import against the order with its file and line; exits 1 if any.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LEAVES = {"tensor", "quant", "stop"}


def layer_ranks() -> "dict[str, int]":
    text = (ROOT / "docs/architecture.md").read_text()
    section = text.split("## Layers", 1)[1]
    block = section.split("```", 2)[1]
    line = next(l for l in block.splitlines() if "◄─" in l)
    ranks = {}
    for rank, group in enumerate(line.split("◄─")):
        for name in group.split(","):
            ranks[name.strip()] = rank
    return ranks


def imports(path: pathlib.Path):
    """(line number, crate-level module) of every `crate::…` path in `path`'s code, a
    `use crate::{a, b::c}` over several lines included."""
    code = []
    for line in path.read_text().splitlines():
        if line.strip().startswith("#[cfg(test)]"):
            break
        code.append(line.split("//", 1)[0])
    text = "\n".join(code)
    line_of = lambda at: text.count("\n", 0, at) + 1
    for m in re.finditer(r"crate::\{([^}]*)\}", text):
        for name in re.finditer(r"(?:^|,)\s*(\w+)", m.group(1)):
            yield line_of(m.start(1) + name.start(1)), name.group(1)
    for m in re.finditer(r"crate::(\w+)", text):
        yield line_of(m.start()), m.group(1)


def main() -> int:
    ranks = layer_ranks()
    src = ROOT / "src"
    wrong = []
    for layer, rank in ranks.items():
        files = sorted((src / layer).rglob("*.rs")) if (src / layer).is_dir() else []
        if (src / f"{layer}.rs").is_file():
            files.append(src / f"{layer}.rs")
        if not files:
            wrong.append(f"docs/architecture.md names the layer `{layer}`, which src/ lacks")
        for path in files:
            for number, name in imports(path):
                if name in LEAVES or name == layer or name not in ranks:
                    continue
                if ranks[name] >= rank:
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: `{layer}` imports `{name}`, "
                                 "which the layer order puts "
                                 + ("beside it" if ranks[name] == rank else "after it"))
    for w in wrong:
        print(w)
    print(f"layer order: {len(ranks)} layers, {len(wrong)} imports against it")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
