"""`udr show`: an evaluation's examples one by one: the test input, the demonstrations the method put in
its prompt (in prompt order), the gold answer and the LM's prediction, read from the saved predictions
(``data/predictions/<method>/<task>.parquet``), which hold every text they need.

Imports of udr.config (pydantic) are inside the functions that use them, to keep the start of `udr` and
of its commands light.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from udr.errors import UdrError
from udr.paths import check_name_length
from udr.util.files import shown_path
from udr.util.readers import read_parquet_checked

if TYPE_CHECKING:
    from udr.config import Settings

NEEDED = ("id", "input", "prediction", "gold", "demo_ids", "demo_inputs", "demo_outputs")
KINDS = {"id": "integer", "input": "text", "prediction": "text", "gold": "text"} | {
    c: "list" for c in ("demo_ids", "demo_inputs", "demo_outputs")
}


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


def read_examples(settings: Settings, method: str, task: str, split: str = "test") -> list[ShownExample]:
    """Every example of `method`'s evaluation of `task` on `split`, in evaluation order."""
    from udr.config import METHODS

    check_name_length(method, "name")
    check_name_length(task, "task")
    path = settings.paths.predictions(method, task, split)
    extra = "" if split == "test" else f" --split {split}"
    if not path.is_file():
        if method not in METHODS:
            raise UdrError(
                f"no evaluation named '{method}' of {task} ({split}) at {shown_path(path, settings.root)}: "
                f"give a method ({', '.join(METHODS)}) or a name saved with `udr evaluate -m METHOD -t {task}"
                f"{extra} --save-as {method}`"
            )
        raise UdrError(
            f"no predictions of {method} on {task} ({split}) at {path}: run `udr evaluate -m {method} -t {task}{extra}`"
        )
    again = (
        f"run `udr evaluate -m {method} -t {task}{extra}` again"
        if method in METHODS
        else f"evaluate it again (`udr evaluate -m METHOD -t {task}{extra} --save-as {method}`)"
    )
    # a null prediction or gold answer is a damaged row, not an empty answer: evaluate writes every one
    frame = read_parquet_checked(path, "predictions", NEEDED, kinds=KINDS, non_null=NEEDED, fix=again)
    return [
        ShownExample(
            int(r["id"]),
            r["input"],
            list(zip(r["demo_ids"], r["demo_inputs"], r["demo_outputs"])),
            r["gold"],
            r["prediction"],
            r["prediction"].strip() == r["gold"].strip(),
        )
        for r in frame.to_dicts()
    ]


def select_examples(examples: list[ShownExample], n: int, *, wrong: bool = False) -> list[ShownExample]:
    """The first `n` examples (only those whose prediction is not the gold answer, with `wrong`)."""
    if n < 1:
        raise UdrError(f"bad count {n}: show at least 1 example")
    return [e for e in examples if not (wrong and e.correct)][:n]
