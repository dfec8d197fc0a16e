"""Small shared helpers below every app: the database clock, the error roots, bounded counts.

It imports no app of the project (the import-linter contract in ``pyproject.toml`` checks it),
so ``audit``, ``inbox``, ``runs`` and ``console`` may all use it.
"""
