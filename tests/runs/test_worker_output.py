"""The consolidator's output: a line when something changes, not the same lines
every pass. In-process, real clock, committed transactions."""

from __future__ import annotations

import pytest

from runs.consolidators import VaultDeduplicator, seed_duplicate_vault
from runs.worker import ConsolidatorWorker

pytestmark = pytest.mark.django_db(transaction=True)


def _pass(worker: ConsolidatorWorker) -> None:
    """Turn until the worker has completed one more run (one pass over the store)."""
    done = worker.progress.runs_completed
    for _ in range(50):
        worker.turn()
        if worker.progress.runs_completed > done:
            return
    raise AssertionError("the pass did not complete")


def test_consolidator_repeated_pass_with_nothing_new_prints_nothing(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"
    seed_duplicate_vault(settings.VAULT_ROOT, originals=2, copies=2)
    lines: list[str] = []
    worker = ConsolidatorWorker(
        store="vault",
        worker_id="c-out",
        idle_seconds=0,
        consolidator=VaultDeduplicator(),
        say=lines.append,
    )

    _pass(worker)
    first = list(lines)
    assert any("planned run" in line for line in first)
    assert sum("(requested)" in line for line in first) == 4
    assert any("complete" in line for line in first)

    # The same duplicates again: every DELETE is already requested, nothing else changed.
    lines.clear()
    _pass(worker)
    _pass(worker)
    assert lines == []

    # Something changes (a new duplicate): that one line, framed by its plan and completion;
    # what the previous pass already said is not said again.
    (settings.VAULT_ROOT / "notes" / "dup-1-copy.md").write_text(
        (settings.VAULT_ROOT / "notes" / "dup-1.md").read_text()
    )
    _pass(worker)
    assert sum("(requested)" in line for line in lines) == 1
    assert sum("(already requested)" in line for line in lines) == 0
    assert "planned run" in lines[0] and "complete" in lines[-1]
    assert len(lines) == 3

    # The next pass: the new DELETE is now "already requested", which is no news either.
    lines.clear()
    _pass(worker)
    assert lines == []


def test_consolidator_first_pass_of_a_process_prints_everything(settings, tmp_path):
    settings.VAULT_ROOT = tmp_path / "vault"
    seed_duplicate_vault(settings.VAULT_ROOT, originals=1, copies=2)
    _pass(
        ConsolidatorWorker(
            store="vault",
            worker_id="c-1",
            idle_seconds=0,
            consolidator=VaultDeduplicator(),
            say=lambda _line: None,
        )
    )
    lines: list[str] = []
    _pass(
        ConsolidatorWorker(
            store="vault",
            worker_id="c-2",
            idle_seconds=0,
            consolidator=VaultDeduplicator(),
            say=lines.append,
        )
    )
    # Nothing new, but this process has said nothing yet: its first pass is news to its reader.
    assert sum("(already requested)" in line for line in lines) == 2
    assert any("planned run" in line for line in lines)
