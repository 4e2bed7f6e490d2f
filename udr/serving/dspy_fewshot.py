"""UDR demonstrations for DSPy programs (the `dspy` extra: `pip install 'udr[dspy]'`).

:class:`UDRFewShot` wraps a DSPy predictor: before each call it sets the predictor's demos to the k
demonstrations UDR retrieves for that call's input, as `dspy.KNNFewShot` does with a symmetric embedder,
but with UDR's query and demonstration encoders::

    qa = UDRFewShot(dspy.Predict("question -> answer"), Retriever.load("models/final"), task="trec")
    qa(question="Who wrote the novel Dracula?")

The demonstrations come from the task's pool (inputs in `input_field`, answers in `output_field`, by
default `question` and `answer`: name your signature's fields otherwise) or from your own `trainset` of
`dspy.Example`s.
"""

from __future__ import annotations

from udr.data.tasks import get_task

try:
    import dspy
except ImportError as exc:  # pragma: no cover - the message is the point
    from udr.errors import UdrError

    raise UdrError("the DSPy component needs dspy: pip install 'udr[dspy]'") from exc

from udr.errors import UdrError


def check_fields(predictor, input_field: str, output_field: str) -> None:
    """A one-line error where the predictor's signature lacks `input_field` among its inputs or
    `output_field` among its outputs (UDRFewShot's defaults are question / answer)."""
    signature = getattr(predictor, "signature", None)
    if signature is None:
        return
    for role, name, fields, option in (
        ("input", input_field, signature.input_fields, "input_field"),
        ("output", output_field, signature.output_fields, "output_field"),
    ):
        if name not in fields:
            raise UdrError(
                f"UDRFewShot: the predictor's signature has no {role} field '{name}' (its {role}s: "
                f"{', '.join(fields) or 'none'}): pass {option}= one of them"
            )


class UDRFewShot(dspy.Module):
    """A predictor whose few-shot demos are retrieved by UDR for each input, most similar last."""

    def __init__(
        self,
        predictor,
        retriever,
        *,
        task: str | None = None,
        trainset: list | None = None,
        instruction: str | None = None,
        k: int = 4,
        input_field: str = "question",
        output_field: str = "answer",
        diversity: float = 0.0,
    ):
        super().__init__()
        check_fields(predictor, input_field, output_field)
        self.predictor, self.retriever = predictor, retriever
        self.k, self.diversity = k, diversity
        self.input_field, self.output_field = input_field, output_field
        if trainset is None and task is None:
            raise UdrError("UDRFewShot needs a task (its pool) or a trainset")
        self.pool = task
        if trainset is not None:
            records = []
            for i, example in enumerate(trainset):
                values = {f: getattr(example, f, None) for f in (input_field, output_field)}
                if not all(isinstance(v, str) and v.strip() for v in values.values()):
                    raise UdrError(f"trainset example {i} needs non-empty '{input_field}' and '{output_field}'")
                records.append({"input": values[input_field], "target": values[output_field]})
            if instruction is None and task is not None:
                instruction = get_task(task, retriever.registry).instruction
            if instruction is None:
                instruction = predictor.signature.instructions
            self.pool = retriever.add_pool(records, instruction=instruction, name=f"dspy-{id(self)}")

    def demonstrations(self, query: str) -> list:
        """The k retrieved demonstrations for `query` as dspy.Examples, most similar last."""
        demos = self.retriever.retrieve(query, task=self.pool, k=self.k, diversity=self.diversity)
        return [
            dspy.Example(**{self.input_field: d.input, self.output_field: d.output}).with_inputs(self.input_field)
            for d in reversed(demos)
        ]

    def forward(self, **kwargs):
        if self.input_field not in kwargs:
            raise UdrError(f"UDRFewShot: the call has no '{self.input_field}' (it has {', '.join(kwargs)})")
        self.predictor.demos = self.demonstrations(kwargs[self.input_field])
        return self.predictor(**kwargs)
