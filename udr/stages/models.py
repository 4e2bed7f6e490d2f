"""The `udr models` stage: the params' model specs (`models.lm`, `models.encoder`) resolved into
safetensors directories under models/base/<role>/ (:func:`udr.lm.models.resolve_model`: a packaged
model, a hub id or a local folder, converted and verified once)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.lm.models import resolve_model

if TYPE_CHECKING:
    from udr.config import Settings


def run_models(
    settings: Settings, roles: list[str] | None = None, *, force: bool = False
) -> Iterator[tuple[str, str, Path, float]]:
    """Resolve `models.lm` and `models.encoder` (or the given roles) into models/base/<role>/; yields
    (role, spec, directory, seconds) as each is done."""
    specs = {"lm": settings.models.lm, "encoder": settings.models.encoder}
    for role in roles or list(specs):
        if role not in specs:
            raise UdrError(f"unknown model role '{role}'; expected one of: {', '.join(specs)}")
        start = time.perf_counter()
        path = resolve_model(specs[role], settings.paths.base_model(role), kind=role, force=force)
        yield role, specs[role], path, time.perf_counter() - start
