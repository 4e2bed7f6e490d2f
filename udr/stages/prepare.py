"""The `udr prepare` stage: one task of the params (`prepare.tasks` or `evaluate.unseen_tasks`) read from
its source and written, normalised, to data/prepared/<task>/ (:func:`udr.data.prepare.prepare_task`).

Imports of udr.data.prepare (numpy) are inside the functions that use them, to keep the start of `udr` and of its
commands light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from udr.config import Settings


def run_prepare(settings: Settings, task_name: str) -> dict:
    """Prepare one task of `settings` into its prepared directory; returns the metadata written."""
    from udr.data.prepare import prepare_task

    caps = settings.task_caps(task_name)
    return prepare_task(
        settings.task(task_name),
        settings.data_dir(),
        settings.paths.prepared_dir(task_name),
        seed=settings.seed,
        test_fraction=settings.prepare.test_fraction,
        max_train=caps.max_train,
        max_test=caps.max_test,
        validation=caps.validation,
    )
