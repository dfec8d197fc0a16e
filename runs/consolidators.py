"""Consolidators: the pluggable planner + applier of consolidation runs.

A consolidator is any object with four methods (``Consolidator`` below). The one in use is named
by ``settings.RUNS_CONSOLIDATOR`` (a dotted path to a class or a factory); ``get_consolidator``
resolves it. ``runs.transitions`` calls ``plan`` (outside any transaction) and ``apply`` (inside
the transaction that records the disposition); the worker calls ``check`` and ``decide``.

The bundled ``VaultDeduplicator`` groups the vault's files by content (sha256), keeps one per
group — the shortest path, ties broken by the path's text — and for each copy it drops requests
a DELETE_OBJECT job through ``inbox.transitions.create_job``. That job waits for an approval and
then goes through the delete executor and reconciliation like any other delete.

Idempotency of its deletes: the job document (idempotency key, job_id, delete_request_id,
mission) is derived from the store, the copy's path and the copy's content hash — not from the
run id — so a replayed disposition *and* a later run over the same vault produce the very same
document, which ``create_job`` answers with the existing job (``created=False``). A copy whose
delete was denied is therefore not asked for again until its content changes.

``seed_duplicate_vault`` writes a small vault with duplicates for the demo and tests.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django.conf import settings
from django.utils.module_loading import import_string

from inbox.errors import InboxError
from inbox.jobtypes import check_vault_path
from inbox.transitions import create_job
from runs.errors import ConsolidatorError

if TYPE_CHECKING:
    from runs.models import Group, Member, Run

log = logging.getLogger(__name__)

DEFAULT_CONSOLIDATOR = "runs.consolidators.VaultDeduplicator"
# Namespace for the DELETE jobs' deterministic job ids.
JOB_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "job-run-console/runs/dedup")


@dataclass(frozen=True)
class PlannedMember:
    item_ref: str
    # Stored on the Member (e.g. the content hash the plan saw).
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedGroup:
    key: str
    members: tuple[PlannedMember, ...]


@runtime_checkable
class Consolidator(Protocol):
    """What a run needs from a consolidator."""

    name: str

    def check(self) -> None:
        """Raise ``ConsolidatorError`` if it cannot work (missing directory, bad setting)."""

    def plan(self, *, store: str, carry_over: Sequence[str]) -> list[PlannedGroup]:
        """Group the store's items; ``carry_over`` are refs the last run deferred."""

    def decide(self, *, run: Run, group: Group, members: Sequence[Member]) -> dict[int, str]:
        """A disposition (keep / merge / drop / defer) per member id of a served group."""

    def apply(self, *, run: Run, group: Group, member: Member, disposition: str) -> dict[str, Any]:
        """Carry out one disposition inside its transaction; return what it produced."""


def get_consolidator(path: str | None = None) -> Consolidator:
    """Build the consolidator named by ``path`` or ``settings.RUNS_CONSOLIDATOR``."""
    path = path or getattr(settings, "RUNS_CONSOLIDATOR", "") or DEFAULT_CONSOLIDATOR
    try:
        factory = import_string(path)
    except ImportError as exc:
        raise ConsolidatorError(f"RUNS_CONSOLIDATOR={path!r} cannot be imported: {exc}") from exc
    try:
        consolidator = factory() if callable(factory) else factory
    except Exception as exc:  # any failure to build it is a configuration problem
        raise ConsolidatorError(f"RUNS_CONSOLIDATOR={path!r} could not be built: {exc}") from exc
    if not isinstance(consolidator, Consolidator):
        raise ConsolidatorError(
            f"RUNS_CONSOLIDATOR={path!r} does not provide name, check, plan, decide and apply"
        )
    return consolidator


# --- the bundled deduplicator -----------------------------------------------------------------


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def keeper_order(item_ref: str) -> tuple[int, str]:
    """Sort key of the copy a group keeps: the shortest path, ties by the path's text."""
    return (len(item_ref), item_ref)


class VaultDeduplicator:
    """Deduplicate ``settings.VAULT_ROOT``: keep one file per identical content, delete the rest.

    Hidden names (a leading dot: temp files of atomic writes) and symlinks are never items — a
    link is not an object of its own, and deleting it could not free anything.
    """

    name = "vault-dedup"

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self._root = Path(root) if root is not None else None

    @property
    def root(self) -> Path:
        return (self._root or Path(settings.VAULT_ROOT)).resolve()

    def check(self) -> None:
        root = self.root
        if not root.is_dir():
            raise ConsolidatorError(
                f"VAULT_ROOT {str(root)!r} is not a directory; set VAULT_ROOT to the vault"
            )

    def scan(self) -> dict[str, list[tuple[str, int]]]:
        """{sha256: [(relative path, size), ...]} of every regular file inside the root."""
        root = self.root
        by_hash: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                path = Path(dirpath) / name
                if path.is_symlink() or not path.is_file():
                    continue
                if not path.resolve().is_relative_to(root):
                    continue
                rel = path.relative_to(root).as_posix()
                if check_vault_path(rel):
                    log.warning("vault-dedup: skipping %r (not a valid vault path)", rel)
                    continue
                try:
                    by_hash[_sha256_file(path)].append((rel, path.stat().st_size))
                except OSError as exc:  # vanished or unreadable meanwhile: not an item now
                    log.warning("vault-dedup: skipping %r: %s", rel, exc)
        return by_hash

    def plan(self, *, store: str, carry_over: Sequence[str]) -> list[PlannedGroup]:
        # Deferred items need no special handling: every plan rescans the whole vault.
        self.check()
        groups = []
        for digest, files in sorted(self.scan().items()):
            if len(files) < 2:
                continue
            files.sort(key=lambda f: keeper_order(f[0]))
            keeper = files[0][0]
            members = tuple(
                PlannedMember(rel, {"sha256": digest, "size": size, "keeper": keeper})
                for rel, size in files
            )
            groups.append(PlannedGroup(key=digest, members=members))
        return groups

    def decide(self, *, run: Run, group: Group, members: Sequence[Member]) -> dict[int, str]:
        """Keep the keeper, drop the copies — unless the keeper changed since the plan: then
        defer them all, so no copy is deleted while its keeper is not what the plan saw."""
        if not members:
            return {}
        keeper = min((m.item_ref for m in members), key=keeper_order)
        digest = members[0].detail.get("sha256", group.key)
        keeper_path = self.root / keeper
        try:
            intact = (
                not keeper_path.is_symlink()
                and keeper_path.is_file()
                and _sha256_file(keeper_path) == digest
            )
        except OSError:
            intact = False
        if not intact:
            return {m.id: "defer" for m in members}
        return {m.id: ("keep" if m.item_ref == keeper else "drop") for m in members}

    def delete_document(self, *, store: str, item_ref: str, digest: str) -> dict[str, Any]:
        """The DELETE_OBJECT job for one dropped copy; the same inputs give the same document."""
        ident = hashlib.sha256(f"{store}\0{item_ref}\0{digest}".encode()).hexdigest()
        key = f"consolidate:dedup:{ident}"
        object_id = (
            item_ref
            if len(item_ref) <= 500
            else f"vault:{hashlib.sha256(item_ref.encode()).hexdigest()}"
        )
        return {
            "job_id": str(uuid.uuid5(JOB_NAMESPACE, key)),
            "job_version": 1,
            "mission_id": f"consolidate:{store}"[:200],
            "job_type": "DELETE_OBJECT",
            "object_id": object_id,
            "vault_path": item_ref,
            "idempotency_key": key,
            "delete_request_id": f"dedup-{ident[:32]}",
            "expected_provenance_hash": digest,
        }

    def apply(self, *, run: Run, group: Group, member: Member, disposition: str) -> dict[str, Any]:
        if disposition != "drop":
            return {}
        digest = member.detail.get("sha256") or group.key
        doc = self.delete_document(store=run.store, item_ref=member.item_ref, digest=digest)
        try:
            job, created = create_job(doc, requested_by=run.worker_id)
        except InboxError as exc:
            raise ConsolidatorError(f"DELETE for {member.item_ref!r} refused: {exc}") from exc
        return {
            "job_id": job.job_id,
            "idempotency_key": doc["idempotency_key"],
            "created": created,
            "job_state": job.state,
        }


# --- demo / test data -------------------------------------------------------------------------


def seed_duplicate_vault(
    root: str | os.PathLike[str], *, originals: int = 3, copies: int = 2
) -> dict[str, Any]:
    """Write ``originals`` notes, each with ``copies`` identical copies, under ``root``.

    Files are (re)written with fixed content, so seeding twice gives the same vault. Returns the
    paths written and how many DELETEs a dedup run should request (``originals * copies``).
    """
    base = Path(root)
    written: list[str] = []
    for i in range(1, originals + 1):
        content = f"# Duplicate note {i}\n\nThe same words, stored {copies + 1} times.\n"
        paths = [f"notes/dup-{i}.md"] + [
            f"archive/copy-{j}/dup-{i}.md" for j in range(1, copies + 1)
        ]
        for rel in paths:
            target = base / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
            written.append(rel)
    return {"written": written, "keepers": originals, "expected_deletes": originals * copies}
