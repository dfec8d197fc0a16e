"""The runs settings are checked by ``manage.py check``, before anything runs."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError


def _ids() -> set[str]:
    return {m.id for m in checks.run_checks(tags=["runs"]) if m.level >= checks.ERROR}


def test_default_runs_settings_pass_the_checks() -> None:
    assert _ids() == set()


@pytest.mark.parametrize(
    "path", ["no.such.module.Thing", "runs.consolidators.DEFAULT_CONSOLIDATOR", "os.getcwd"]
)
def test_consolidator_that_cannot_be_built_is_runs_e001(settings, path) -> None:
    settings.RUNS_CONSOLIDATOR = path
    assert _ids() == {"runs.E001"}


@pytest.mark.parametrize("value", [0, -5, "300", 2.5, True])
def test_stuck_after_that_is_not_positive_seconds_is_runs_e002(settings, value) -> None:
    settings.RUNS_STUCK_AFTER_SECONDS = value
    assert _ids() == {"runs.E002"}


@pytest.mark.django_db
def test_manage_py_check_reports_a_bad_consolidator(settings) -> None:
    settings.RUNS_CONSOLIDATOR = "no.such.module.Thing"
    with pytest.raises(SystemCheckError, match=r"runs\.E001"):
        call_command("check")
