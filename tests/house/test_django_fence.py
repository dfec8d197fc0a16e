"""Django's private parts are touched in three modules only: ``core/db.py`` and the job
writer's two database dialects. A private part is a name with a leading underscore that Django
itself defines (``instance._state``, ``wrapper._commit``…), a private Django module, or a class
of Django's database layer subclassed. Django documents a few underscore names as public API
(``_meta``, ``_default_manager``, ``_base_manager``); they may be used anywhere.

``docs/performance.md`` lists what each fenced use buys; ``tests/house/test_django_contract.py``
fails, in one place, if a Django upgrade changes what they rely on."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import django

from tests.house.sources import product_files

FENCED = {"core/db.py", "inbox/writer/postgresql.py", "inbox/writer/sqlite.py"}
DOCUMENTED = {"_meta", "_default_manager", "_base_manager"}
# Names Django happens to define too, used here on objects that are not Django's:
# ``parser._actions`` is argparse's list of a parser's arguments.
NOT_DJANGOS = {"_actions"}


@functools.cache
def djangos_private_names() -> frozenset[str]:
    """Every single-underscore name Django defines: functions, methods, classes, attributes
    set on ``self`` or on a class, module globals."""
    names: set[str] = set()
    for path in Path(django.__file__).parent.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return frozenset(n for n in names if n.startswith("_") and not n.startswith("__"))


def _ours(trees: dict[str, ast.Module]) -> set[str]:
    """Underscore names our code defines for itself (on ``self``, as a def or class)."""
    names: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
    return names


def private_uses(trees: dict[str, ast.Module]) -> list[str]:
    """Each use of a private Django part, as ``path:line what``."""
    private = djangos_private_names() - _ours(trees) - DOCUMENTED - NOT_DJANGOS
    found = []
    for path, tree in trees.items():
        backends: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django"):
                module = node.module or ""
                for alias in node.names:
                    if alias.name.startswith("_") or "._" in f".{module}":
                        found.append(f"{path}:{node.lineno} imports {module}.{alias.name}")
                    if module.startswith("django.db.backends"):
                        backends.add(alias.asname or alias.name)
            elif isinstance(node, ast.Attribute) and node.attr in private:
                found.append(f"{path}:{node.lineno} uses .{node.attr}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if ast.unparse(base).split(".")[0] in backends:
                        found.append(f"{path}:{node.lineno} subclasses {ast.unparse(base)}")
    return found


def test_djangos_private_parts_are_used_only_behind_the_fence() -> None:
    outside = {p: t for p, t in product_files().items() if p not in FENCED}
    assert private_uses(outside) == []


def test_the_fence_sees_each_kind_of_private_use() -> None:
    """The check finds what it is meant to find (each kind once), and not our own names."""
    sample = ast.parse(
        "from django.db.backends.utils import CursorWrapper\n"
        "from django.db.models.base import _something\n"
        "class Lean(CursorWrapper):\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "job._state.adding = False\n"
        "wrapper._commit()\n"
        "x = self._mine + Job._meta.db_table\n"
    )
    uses = private_uses({"sample.py": sample})
    assert [u.split(" ", 1)[1] for u in uses] == [
        "imports django.db.models.base._something",
        "uses ._state",
        "uses ._commit",
        "subclasses CursorWrapper",
    ]


def test_the_fenced_modules_are_where_the_private_uses_are() -> None:
    """Each fenced module exists; ``core/db.py`` holds the ones it is documented to hold."""
    trees = product_files()
    assert set(trees) >= FENCED
    assert private_uses({"core/db.py": trees["core/db.py"]})
