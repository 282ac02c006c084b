"""Print compiled-vs-pure ratios from a pytest-benchmark JSON file.

Usage: ``python benchmarks/micro/ratios.py micro.json`` (see ``test_hot_paths.py``).
The ratio is pure median time / compiled median time (higher is better).
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec


def main(path: str) -> None:
    doc = msgspec.json.decode(Path(path).read_bytes())
    groups: dict[str, dict[str, float]] = {}
    for b in doc["benchmarks"]:
        impl = "compiled" if "compiled" in b["param"] else "pure"
        groups.setdefault(b["group"], {})[impl] = b["stats"]["median"]
    print(f"{'hot path':40} {'pure':>12} {'compiled':>12} {'ratio':>7}")
    for group, t in sorted(groups.items()):
        if "pure" in t and "compiled" in t:
            pure, compiled = t["pure"], t["compiled"]
            print(f"{group:40} {pure * 1e9:10.0f}ns {compiled * 1e9:10.0f}ns {pure / compiled:6.2f}x")


if __name__ == "__main__":
    main(sys.argv[1])
