"""The consolidator worker; ``manage.py run_consolidator`` starts it.

A ``WorkerLoop`` (``inbox.loop``: heartbeat, signals, database-error backoff, one worker-id
scheme). One turn: ask ``next_group`` (which plans a run when this worker has none effectively
active), let the consolidator decide each member, dispose them one by one (each disposition
refreshes the lease), and go on until the run closes complete. Every write goes through
``runs.transitions``; this module never assigns a status.

Stopping: SIGTERM/SIGINT set a flag that is checked between members, so the member in flight is
finished (its transaction commits or not at all). The worker then closes its own run
``abandoned`` — rather than leaving it to expire — so the console shows at once that nobody works
on the store and the next consolidator's plan need not wait for, or take over, a dead lease.
A worker that is killed outright leaves its run to expire.

If another worker takes the store over, this one's writes are rejected (``GroupExpired``); it
then stops instead of taking the store back, so two workers never ping-pong over a store.

Output: a line when something changes, not the same lines every pass. A member's line (keep,
drop with its DELETE, defer) prints only if the previous pass did not say the same about that
member, so re-planning the same duplicates stays quiet and a new duplicate prints one line; a
process's first pass prints everything (its reader has seen nothing yet). The plan and the
completion lines frame a pass that printed something and are left out otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from core.errors import ConfigurationError
from inbox.loop import WorkerLoop
from runs import transitions
from runs.consolidators import Consolidator, get_consolidator
from runs.errors import ConsolidatorError, GroupExpired, RunError
from runs.models import Disposition, Run, RunStatus
from runs.selectors import group_counts_by_run

log = logging.getLogger(__name__)


@dataclass
class Progress:
    runs_planned: int = 0
    runs_completed: int = 0
    groups: int = 0
    deferred: int = 0
    disposed: dict[str, int] = field(default_factory=dict)
    stop_reason: str = ""


class ConsolidatorWorker(WorkerLoop):
    """Serve and dispose one store's groups under a run lease until done or told to stop."""

    kind = "consolidator"

    def __init__(
        self,
        *,
        store: str,
        worker_id: str | None = None,
        lease_seconds: int = transitions.DEFAULT_LEASE_SECONDS,
        once: bool = False,
        idle_seconds: float = 30.0,
        consolidator: Consolidator | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        if idle_seconds < 0:
            raise ConfigurationError(f"--idle must be 0 or more seconds, got {idle_seconds}")
        super().__init__(
            worker_id=worker_id,
            store=store,
            # A long group decision or an idle wait must not make the row look dead.
            poll_seconds=max(idle_seconds, 1.0),
            lease_seconds=lease_seconds,
            out=say or (lambda text: log.info("%s", text)),
        )
        self.once = once
        self.idle_seconds = idle_seconds
        self.consolidator = consolidator or get_consolidator()
        self.progress = Progress()
        self._run_id = ""
        # The current pass's plan line, printed before its first line that is news.
        self._plan_line = ""
        # What this pass and the previous one said about each member (without run ids).
        self._pass: set[str] = set()
        self._last_pass: set[str] = set()
        self._said = False

    # --- the loop's hooks -------------------------------------------------------------------

    def setup(self) -> str:
        self.consolidator.check()
        return f"store {self.store!r} (lease {self.lease_seconds}s, {self.consolidator.name})"

    def stopping_note(self) -> str:
        return "stopping after the member in hand; the run will be closed abandoned"

    def stop(self, reason: str = "asked to stop") -> None:
        if not self.stopping:
            self.progress.stop_reason = reason
        super().stop(reason)

    def counters(self) -> tuple[int | None, int | None]:
        return self._done_count(), None

    def result(self) -> Progress:
        return self.progress

    def finish(self) -> None:
        try:
            self._close_own_run()
        except RunError as exc:
            # Never mask the error that ended the loop; the run will expire on its own.
            log.warning("consolidator %s: could not close its run on stop: %s", self.worker_id, exc)

    def summary(self) -> str:
        p = self.progress
        disposed = ", ".join(f"{n} {d}" for d, n in sorted(p.disposed.items())) or "none"
        return (
            f"stopped ({p.stop_reason or 'done'}): {p.runs_planned} run(s) planned, "
            f"{p.runs_completed} complete, {p.groups} group(s) served, "
            f"{p.deferred} deferred; dispositions: {disposed}"
        )

    def _done_count(self) -> int:
        return sum(self.progress.disposed.values())

    def turn(self) -> bool:
        if self._run_id and self._taken_over():
            return False
        served = transitions.next_group(
            store=self.store,
            owner=self.worker_id,
            lease_seconds=self.lease_seconds,
            consolidator=self.consolidator,
        )
        self._run_id = served.run.run_id
        if served.planned:
            self.progress.runs_planned += 1
            counts = group_counts_by_run([served.run.run_id])[served.run.run_id]
            self._start_pass(
                f"planned run {served.run.run_id}: {sum(counts.values())} group(s), "
                f"lease until {served.run.expires_at.isoformat()}"
            )
        if served.completed:
            return self._run_done(served.run.run_id)
        if served.group is None:
            return True
        return self._work_group(served)

    # --- output: news at once, routine only when the pass differs from the last one --------

    def _start_pass(self, plan_line: str = "") -> None:
        self._plan_line = plan_line
        self._pass = set()
        self._said = False

    def _tell(self, line: str, *, same: str) -> None:
        """Print ``line`` unless the previous pass said ``same`` too (then it is no news)."""
        self._pass.add(same)
        if same in self._last_pass:
            return
        if not self._said and self._plan_line:
            self.say(self._plan_line)
        self._said = True
        self.say(line)

    def _end_pass(self, closing: str = "") -> None:
        """Close a pass: its closing line only if it printed something."""
        if self._said and closing:
            self.say(closing)
        self._last_pass = self._pass
        self._start_pass()

    def _completed(self, run_id: str) -> None:
        self.progress.runs_completed += 1
        done = ", ".join(f"{n} {d}" for d, n in sorted(self.progress.disposed.items())) or "none"
        self._end_pass(f"run {run_id} complete; dispositions so far: {done}")

    def _work_group(self, served: transitions.Served) -> bool:
        """Dispose a served group's members; False when the worker must stop."""
        group = served.group
        assert group is not None
        self.progress.groups += 1
        try:
            decisions = self.consolidator.decide(
                run=served.run, group=group, members=served.members
            )
        except ConsolidatorError as exc:
            return self._defer(group.id, f"decide failed: {exc}")
        open_members = [m for m in served.members if m.disposition is None]
        if open_members and all(decisions.get(m.id) == Disposition.DEFER for m in open_members):
            # The consolidator wants the group put aside as a whole (e.g. its keeper changed);
            # a single deferred member is disposed ``defer`` like any other disposition.
            return self._defer(group.id, "consolidator deferred the group")
        for member in served.members:
            if member.disposition is not None:
                continue
            if self.stopping:
                return False
            disposition = decisions.get(member.id)
            if disposition is None:
                return self._defer(group.id, f"no decision for member {member.id}")
            try:
                result = transitions.dispose_member(
                    member_id=member.id,
                    owner=self.worker_id,
                    disposition=disposition,
                    consolidator=self.consolidator,
                )
            except GroupExpired as exc:
                return self._lost(exc)
            except ConsolidatorError as exc:
                return self._defer(group.id, f"apply failed for {member.item_ref!r}: {exc}")
            counts = self.progress.disposed
            counts[disposition] = counts.get(disposition, 0) + 1
            self.beat()
            job = result.applied.get("job_id")
            line = f"  group {group.seq}: {disposition} {member.item_ref}"
            # Keyed without the group number: a new duplicate may renumber the groups.
            same = f"{disposition} {member.item_ref} {job or ''}"
            if job and result.applied.get("created"):
                self._tell(f"{line} → DELETE job {job} (requested)", same=same)
            elif job:
                self._tell(f"{line} → DELETE job {job} (already requested)", same=same)
            else:
                self._tell(line, same=same)
            if result.run_closed:
                # The last member closed the run: no member of this group is left open.
                return self._run_done(served.run.run_id)
        return True

    def _run_done(self, run_id: str) -> bool:
        """A run closed complete: with --once the worker stops; else it waits --idle seconds
        before it plans the next."""
        self._completed(run_id)
        if self.once:
            self.stop("run complete (--once)")
            return False
        self.wait(self.idle_seconds)
        return True

    def _defer(self, group_id: int, reason: str) -> bool:
        try:
            result = transitions.defer_group(group_id=group_id, owner=self.worker_id, reason=reason)
        except GroupExpired as exc:
            return self._lost(exc)
        self.progress.deferred += 1
        # The same deferral every pass (a keeper that stays changed) is not news twice.
        self._tell(f"  deferred group {result.group.seq}: {reason}", same=f"deferred {reason}")
        if result.run_closed:
            self._completed(result.group.run_id)
            if self.once:
                self.stop("run complete (--once)")
                return False
        return True

    def _taken_over(self) -> bool:
        """True (and stop requested) when another worker's run holds the store now.

        ``next_group`` would plan anew and take the store back; a displaced worker stops instead.
        """
        if self._run_id:
            # Our own row says so even when the taker has already finished its run.
            mine = Run.objects.filter(run_id=self._run_id).values("status", "closed_by").first()
            if mine and mine["status"] == RunStatus.TAKEN_OVER:
                self.stop(
                    f"store taken over by {mine['closed_by']} (our run {self._run_id} closed)"
                )
                return True
        try:
            holder = transitions.current_run(self.store)
        except RunError as err:
            self.stop(str(err))
            return True
        if (
            holder is not None
            and holder.worker_id != self.worker_id
            and transitions.is_effectively_active(holder)
        ):
            self.stop(f"store taken over by {holder.worker_id} (run {holder.run_id})")
            return True
        return False

    def _lost(self, exc: GroupExpired) -> bool:
        """Our run is no longer effectively ours. Stop if someone else holds the store now."""
        if self._taken_over():
            self.say(f"write rejected: {exc}; stopping — {self.progress.stop_reason}")
            return False
        # Our own lease lapsed (nobody took over): the next turn plans a fresh run.
        self.say(f"write rejected: {exc}; planning again")
        self._end_pass()
        return True

    def _close_own_run(self) -> None:
        """On a graceful stop, close our still-active run abandoned (see the module docstring)."""
        if not self._run_id:
            return
        try:
            run = transitions.current_run(self.store)
        except RunError:
            return
        if run is None or run.run_id != self._run_id or run.worker_id != self.worker_id:
            return
        if run.status != RunStatus.ACTIVE:
            return
        try:
            transitions.close_run(
                run.run_id,
                status=RunStatus.ABANDONED,
                actor=self.worker_id,
                reason=f"worker stopped: {self.progress.stop_reason or 'stopped'}",
            )
        except RunError as exc:
            self.say(f"could not close run {run.run_id}: {exc}")
            return
        self.say(f"closed run {run.run_id} abandoned ({self.progress.stop_reason})")
