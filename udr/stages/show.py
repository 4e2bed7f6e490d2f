"""`udr show`: an evaluation's examples one by one: the test input, the demonstrations the method put in
its prompt (in prompt order), the gold answer and the LM's prediction, read from the saved predictions
(``data/predictions/<method>/<task>.parquet``), which hold every text they need.

Imports of polars and udr.config (pydantic) are inside the functions that use them, to keep the start of `udr` and
of its commands light.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from udr.errors import UdrError
from udr.util.files import shown_path

NEEDED = ("id", "input", "prediction", "gold", "demo_ids", "demo_inputs", "demo_outputs")


@dataclass(frozen=True)
class ShownExample:
    """One evaluated example: its id and input, the demonstrations of its prompt in prompt order
    (pool id, input, output), the gold answer, the prediction, and whether they match exactly."""

    id: int
    input: str
    demonstrations: list[tuple[int, str, str]]
    gold: str
    prediction: str
    correct: bool

    def to_dict(self) -> dict:
        out = asdict(self)
        out["demonstrations"] = [{"pool_id": i, "input": x, "output": y} for i, x, y in self.demonstrations]
        return out


def read_examples(settings, method: str, task: str, split: str = "test") -> list[ShownExample]:
    """Every example of `method`'s evaluation of `task` on `split`, in evaluation order."""
    import polars as pl

    from udr.config import METHODS

    path = settings.paths.predictions(method, task, split)
    if not path.is_file():
        extra = "" if split == "test" else f" --split {split}"
        if method not in METHODS:
            raise UdrError(
                f"no evaluation named '{method}' of {task} ({split}) at {shown_path(path, settings.root)}: "
                f"give a method ({', '.join(METHODS)}) or a name saved with `udr evaluate -m METHOD -t {task}"
                f"{extra} --save-as {method}`"
            )
        raise UdrError(
            f"no predictions of {method} on {task} ({split}) at {path}: run `udr evaluate -m {method} -t {task}{extra}`"
        )
    frame = pl.read_parquet(path)
    missing = [c for c in NEEDED if c not in frame.columns]
    if missing:
        raise UdrError(
            f"predictions {path} lack {', '.join(missing)} (written by an older udr): run `udr evaluate` again"
        )
    return [
        ShownExample(
            int(r["id"]),
            r["input"],
            list(zip(r["demo_ids"], r["demo_inputs"], r["demo_outputs"])),
            r["gold"],
            r["prediction"],
            r["prediction"].strip() == r["gold"].strip(),
        )
        for r in frame.select(NEEDED).to_dicts()
    ]


def select_examples(examples: list[ShownExample], n: int, *, wrong: bool = False) -> list[ShownExample]:
    """The first `n` examples (only those whose prediction is not the gold answer, with `wrong`)."""
    if n < 1:
        raise UdrError(f"bad count {n}: show at least 1 example")
    return [e for e in examples if not (wrong and e.correct)][:n]
