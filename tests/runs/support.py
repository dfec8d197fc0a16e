"""Test consolidators and helpers for the runs tests.

``StaticConsolidator`` plans fixed groups; ``EnvConsolidator`` does the same from environment
variables so real worker processes (``RUNS_CONSOLIDATOR=tests.runs.support.EnvConsolidator``) can
use it: ``RUNS_TEST_GROUPS="3x2"`` plans 3 groups of 2 members and ``RUNS_TEST_DECIDE_SLEEP``
makes every decision (once per served group, outside any transaction) take that many seconds, so
a test can act while a worker is mid-run. Sleeping in ``apply`` instead would hold SQLite's write
lock and starve every other writer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from runs.consolidators import PlannedGroup, PlannedMember


class StaticConsolidator:
    name = "static-test"

    def __init__(self, groups: int = 2, members: int = 2, decide_sleep: float = 0.0) -> None:
        self.groups = groups
        self.members = members
        self.decide_sleep = decide_sleep
        self.applied: list[tuple[str, str]] = []
        self.carry_over_seen: list[list[str]] = []

    def check(self) -> None:
        return None

    def plan(self, *, store: str, carry_over: Sequence[str]) -> list[PlannedGroup]:
        self.carry_over_seen.append(list(carry_over))
        return [
            PlannedGroup(
                key=f"g{g}",
                members=tuple(
                    PlannedMember(f"{store}/item-{g}-{m}", {"n": m}) for m in range(self.members)
                ),
            )
            for g in range(self.groups)
        ]

    def decide(self, *, run, group, members) -> dict[int, str]:
        if self.decide_sleep:
            time.sleep(self.decide_sleep)
        return {m.id: ("keep" if i == 0 else "drop") for i, m in enumerate(members)}

    def apply(self, *, run, group, member, disposition: str) -> dict[str, Any]:
        self.applied.append((member.item_ref, disposition))
        return {"seen": disposition}


class EnvConsolidator(StaticConsolidator):
    def __init__(self) -> None:
        spec = os.environ.get("RUNS_TEST_GROUPS", "2x2")
        groups, members = (int(x) for x in spec.split("x"))
        super().__init__(groups, members, float(os.environ.get("RUNS_TEST_DECIDE_SLEEP", "0")))
