"""The product's own Python files (not tests, benchmarks or migrations), parsed once."""

from __future__ import annotations

import ast
import functools
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def product_files() -> dict[str, ast.Module]:
    """Each product module by its path from the repository root, as a syntax tree."""
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    paths = [
        p for p in listed if not p.startswith(("tests/", "bench/")) and "/migrations/" not in p
    ] or [str(p.relative_to(ROOT)) for p in ROOT.glob("[!.]*/**/*.py")]
    return {p: ast.parse((ROOT / p).read_text(), filename=p) for p in paths if (ROOT / p).exists()}
