"""The task registry: one table of every task udr knows.

A task says what its rows mean (how a raw record becomes an :class:`Example`), how the LM sees it
(instruction, prompt template, label verbalizers or choices), how it is scored (metric), and where
its data comes from (the offline mirror, a builder in this package, or the upstream hub dataset).

Prompt convention (the published code's): a demonstration or query is rendered as
``template.format(input=..., answer=...)`` with ``template = "{input}\\t{answer}"``; demonstrations
are joined by newlines. For classification the answer is the label's verbalization ("It was great ."),
for multiple choice the chosen option's text, for generation the target text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from udr.errors import UdrError

TaskKind = Literal["classification", "multiple_choice", "generation"]
TASK_KINDS: tuple[str, ...] = get_args(TaskKind)

DEFAULT_TEMPLATE = "{input}\t{answer}"


class RowError(ValueError):
    """A raw record does not have the shape its task expects (the reason is the message)."""


@dataclass(frozen=True)
class Example:
    """A normalised record. For classification `choices` are the task's verbalizers."""

    input: str
    target: str
    label: int  # index into choices; -1 for generation
    choices: tuple[str, ...]
    references: tuple[str, ...]


# ---------------------------------------------------------------- data sources


@dataclass(frozen=True)
class MirrorSource:
    """JSON-lines files in `<data dir>/<folder>/<split>.jsonl`.

    `train`/`test` name the file used for each split; where one is None, both splits are carved
    by a seeded split from the other file.
    """

    folder: str
    train: str | None
    test: str | None

    def describe(self) -> str:
        if self.train and self.test:
            return f"mirror:{self.folder} (train={self.train}, test={self.test})"
        return f"mirror:{self.folder} (seeded split of {self.train or self.test})"


@dataclass(frozen=True)
class BuiltinSource:
    """Records built by a function of this package (no files needed); always carved by a seeded split."""

    builder: str  # "module:function" returning list[dict]

    def describe(self) -> str:
        return f"builtin:{self.builder}"


@dataclass(frozen=True)
class HubSource:
    """The upstream dataset on the Hugging Face hub (users who are online)."""

    hub_id: str
    train: str = "train"
    test: str = "test"

    def describe(self) -> str:
        return f"hub:{self.hub_id}"


Source = MirrorSource | BuiltinSource | HubSource


# ---------------------------------------------------------------- row normalisers


def _text(row: dict, key: str) -> str:
    if key not in row:
        raise RowError(f"missing field '{key}'")
    value = row[key]
    if not isinstance(value, str):
        raise RowError(f"field '{key}' must be a string, got {type(value).__name__}")
    value = " ".join(value.split())
    if not value:
        raise RowError(f"field '{key}' is empty")
    return value


@dataclass(frozen=True)
class Classification:
    """Text(s) -> one of a fixed label set. `labels[i]` (raw) is verbalised as `verbalizers[i]`."""

    labels: tuple[str, ...]
    verbalizers: tuple[str, ...]
    input_format: str = "{text}"
    text_fields: tuple[str, ...] = ("text",)

    def __call__(self, row: dict) -> Example:
        fields = {k: _text(row, k) for k in self.text_fields}
        raw = row.get("label")
        if raw is None:
            raise RowError("missing field 'label'")
        if str(raw) not in self.labels:
            raise RowError(f"unknown label {raw!r} (expected one of {', '.join(self.labels)})")
        label = self.labels.index(str(raw))
        return Example(
            input=self.input_format.format(**fields),
            target=self.verbalizers[label],
            label=label,
            choices=self.verbalizers,
            references=(self.verbalizers[label],),
        )


@dataclass(frozen=True)
class MultipleChoice:
    """A question with per-row options; `label` is the index of the right one."""

    input_format: str = "{question}"
    fields: tuple[str, ...] = ("question",)

    def __call__(self, row: dict) -> Example:
        choices = row.get("choices")
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            raise RowError("field 'choices' must be a list of at least 2 strings")
        choices = tuple(" ".join(c.split()) for c in choices)
        label = row.get("label")
        if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(choices):
            raise RowError(f"field 'label' must be an integer index into choices, got {label!r}")
        values = {k: _text(row, k) for k in self.fields}
        values.update({f"choice{i}": c for i, c in enumerate(choices)})
        return Example(
            input=self.input_format.format(**values),
            target=choices[label],
            label=label,
            choices=choices,
            references=(choices[label],),
        )


@dataclass(frozen=True)
class Generation:
    """`input` -> `target` (or several references in `targets`)."""

    def __call__(self, row: dict) -> Example:
        source = _text(row, "input")
        if "targets" in row:
            refs = row["targets"]
            if not isinstance(refs, list) or not refs or not all(isinstance(r, str) and r.strip() for r in refs):
                raise RowError("field 'targets' must be a non-empty list of non-empty strings")
            refs = tuple(" ".join(r.split()) for r in refs)
        else:
            refs = (_text(row, "target"),)
        return Example(input=source, target=refs[0], label=-1, choices=(), references=refs)


@dataclass(frozen=True)
class CodeGeneration(Generation):
    """Like :class:`Generation` but keeps the input's line structure (code), escaped to one line.

    Prompts put one demonstration per line, so newlines in code are written as the two characters
    backslash-n (as CodeXGLUE's flattened code does) and indentation survives.
    """

    def __call__(self, row: dict) -> Example:
        code = row.get("input")
        if not isinstance(code, str) or not code.strip():
            raise RowError("field 'input' must be a non-empty string")
        flat = code.strip("\n").replace("\\", "\\\\").replace("\t", "    ").replace("\n", "\\n")
        target = _text(row, "target")
        return Example(input=flat, target=target, label=-1, choices=(), references=(target,))


# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Task:
    """A registered task.

    kind: how the LM answers (a label of a fixed set, one of the row's choices, or free text);
    family: the paper's task family ("sentiment", "semantic parsing", ...), for reports only.
    The template renders a demonstration and the query (see :meth:`render`, :meth:`render_query`).
    """

    name: str
    kind: TaskKind
    family: str
    instruction: str
    metric: str
    normalize: Callable[[dict], Example]
    source: Source
    template: str = DEFAULT_TEMPLATE
    # Test rows with identical input are merged into one multi-reference example (E2E style data).
    group_test_references: bool = False

    @property
    def generation(self) -> bool:
        """Whether the answer is free text (scored and predicted token by token)."""
        return self.kind == "generation"

    def render(self, input: str, answer: str) -> str:
        """One demonstration (input and answer) as the LM and the demonstration encoder E_d read it."""
        return self.template.format(input=input, answer=answer)

    def render_query(self, input: str) -> str:
        """The query as it ends a prompt: the template up to where the answer goes."""
        head, _, _ = self.template.partition("{answer}")
        return head.format(input=input)


SENTIMENT = "Sentiment of the sentence: "
TOPIC = "Topic of the text: "
NLI = "Recognizing textual entailment between these 2 texts. "
SEMPARSE = "Parse the sentence into logical form: "
SUMMARY = "Summarize the text: "
CODE = "Comment on the code. Code: "
DATA2TEXT = "Describe the table in natural language. Table: "
SIMPLIFY = "Simplify the text: "
COMMONGEN = "Generate a sentence using these concepts: "

_POLARITY = Classification(("negative", "positive"), ("It was terrible .", "It was great ."))


def _mirror(folder: str, train: str | None, test: str | None) -> MirrorSource:
    return MirrorSource(folder, train, test)


# fmt: off
# name, kind, family, instruction, metric, row normaliser, source.
_TASKS: list[Task] = [
    # sentiment
    Task("sst2", "classification", "sentiment", SENTIMENT, "accuracy", _POLARITY, _mirror("sst2", "train", "test")),
    Task("sst5", "classification", "sentiment", SENTIMENT, "accuracy",
         Classification(("very negative", "negative", "neutral", "positive", "very positive"),
                        tuple(f"It was {w} ." for w in ("terrible", "bad", "okay", "good", "great"))),
         _mirror("sst5", "train", "test")),
    Task("mr", "classification", "sentiment", SENTIMENT, "accuracy", _POLARITY, _mirror("mr", "train", "test")),
    Task("cr", "classification", "sentiment", SENTIMENT, "accuracy", _POLARITY, _mirror("cr", "train", "test")),
    # topic (agnews: the mirror has only the test split, so train and test are a seeded split of it)
    Task("agnews", "classification", "topic", TOPIC, "accuracy",
         Classification(("World", "Sports", "Business", "Sci/Tech"),
                        ("Topic: World.", "Topic: Sports.", "Topic: Business.", "Topic: Technology.")),
         _mirror("agnews", None, "test")),
    Task("trec", "classification", "topic", "Topic of the question: ", "accuracy",
         Classification(("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"),
                        tuple(f"Answer: {w} ." for w in
                              ("Abbreviation", "Description", "Entity", "Human", "Location", "Number"))),
         _mirror("trec", "train", "test")),
    # NLI (snli: no train split here, validation is the demonstration pool)
    Task("rte", "classification", "nli", NLI, "accuracy",
         Classification(("entailment", "not_entailment"), ("Answer: True .", "Answer: False ."),
                        "{text_a} Question: {text_b} True or False?", ("text_a", "text_b")),
         _mirror("rte", "train", "validation")),
    Task("snli", "classification", "nli", NLI, "accuracy",
         Classification(("entailment", "neutral", "contradiction"),
                        ("Answer: Entailment .", "Answer: Inconclusive .", "Answer: Contradiction ."),
                        "{text_a} Question: {text_b} Entailment, Inconclusive or Contradiction?",
                        ("text_a", "text_b")),
         _mirror("snli", "validation", "test")),
    # subjectivity, acceptability
    Task("subj", "classification", "subjectivity", "Subjectivity of the sentence: ", "accuracy",
         Classification(("subjective", "objective"), ("It's subjective .", "It's objective .")),
         _mirror("subj", "train", "test")),
    Task("cola", "classification", "acceptability", "Grammaticality of the sentence: ", "accuracy",
         Classification(("unacceptable", "acceptable"), ("It is not grammatical .", "It is grammatical .")),
         _mirror("cola", "train", "validation")),
    # multiple choice (cosmos_qa: only validation exists here, seeded split)
    Task("copa", "multiple_choice", "multiple choice", "Choose the more plausible alternative: ", "accuracy",
         MultipleChoice("{question} What was the {asks_for}?", ("question", "asks_for")),
         _mirror("copa", "train", "validation")),
    Task("cosmos_qa", "multiple_choice", "multiple choice", "Answer the question about the context: ", "accuracy",
         MultipleChoice("{context} Question: {question}", ("context", "question")),
         _mirror("cosmos_qa", None, "validation")),
    Task("comv", "multiple_choice", "multiple choice", "Pick the statement that is against common sense: ",
         "accuracy",
         MultipleChoice("Which statement of the two is against common sense? Statement 1: {choice0} "
                        "Statement 2: {choice1}", ()),
         _mirror("comv", "train", "test")),
    Task("come", "multiple_choice", "multiple choice", "Explain why the statement is against common sense: ",
         "accuracy", MultipleChoice("{question} Why is this against common sense?"),
         _mirror("come", "train", "test")),
    # generation. break and smcalflow: only validation exists here (seeded split); the paper's BREAK
    # LF-EM needs the BREAK evaluator. e2e and dart: no train split, validation is the pool, and test
    # references are grouped by input.
    Task("break", "generation", "semantic parsing", SEMPARSE, "exact_match", Generation(),
         _mirror("break", None, "validation")),
    Task("smcalflow", "generation", "semantic parsing", SEMPARSE, "exact_match", Generation(),
         _mirror("smcalflow", None, "validation")),
    Task("commongen", "generation", "commonsense generation", COMMONGEN, "bleu", Generation(),
         _mirror("commongen", "train", "test")),
    Task("e2e", "generation", "data to text", DATA2TEXT, "bleu", Generation(),
         _mirror("e2e", "validation", "test"), group_test_references=True),
    Task("dart", "generation", "data to text", DATA2TEXT, "bleu", Generation(),
         _mirror("dart", "validation", "test"), group_test_references=True),
    # built from the installed Python standard library's documented functions
    Task("python_code", "generation", "code summarization", CODE, "bleu", CodeGeneration(),
         BuiltinSource("udr.data.python_code:build_python_code_examples")),
]

# The paper's tasks that exist only upstream (need network and `pip install datasets`). Their rows
# are read with the kind's normaliser from the hub dataset's `input`/`target` (generation) or
# `sentence`/`label` columns.
_HUB_ONLY: list[tuple[str, TaskKind, str, str, str, str]] = [
    ("mnli", "classification", "nli", NLI, "accuracy", "KaiLv/UDR_MNLI"),
    ("dbpedia", "classification", "topic", TOPIC, "accuracy", "KaiLv/UDR_DBPedia"),
    ("yahoo", "classification", "topic", TOPIC, "accuracy", "KaiLv/UDR_Yahoo"),
    ("amazon", "classification", "sentiment", SENTIMENT, "accuracy", "KaiLv/UDR_Amazon"),
    ("yelp", "classification", "sentiment", SENTIMENT, "accuracy", "KaiLv/UDR_Yelp"),
    ("mtop", "generation", "semantic parsing", SEMPARSE, "exact_match", "KaiLv/UDR_MTOP"),
    ("cnndailymail", "generation", "summarization", SUMMARY, "rouge", "KaiLv/UDR_CNNDailyMail"),
    ("pubmed", "generation", "summarization", SUMMARY, "rouge", "KaiLv/UDR_PubMed"),
    ("reddit", "generation", "summarization", SUMMARY, "rouge", "KaiLv/UDR_Reddit"),
    ("roc_story", "generation", "story generation", "Continue the story: ", "bleu", "KaiLv/UDR_RocStory"),
    ("roc_ending", "generation", "story generation", "Finish the story: ", "bleu", "KaiLv/UDR_RocEnding"),
    ("go", "generation", "code summarization", CODE, "bleu", "KaiLv/UDR_Go"),
    ("java", "generation", "code summarization", CODE, "bleu", "KaiLv/UDR_Java"),
    ("php", "generation", "code summarization", CODE, "bleu", "KaiLv/UDR_PHP"),
    ("python", "generation", "code summarization", CODE, "bleu", "KaiLv/UDR_Python"),
    ("wikiauto", "generation", "simplification", SIMPLIFY, "sari", "KaiLv/UDR_WikiAuto"),
]
# fmt: on


@dataclass(frozen=True)
class HubClassification:
    """Upstream classification rows: a `sentence` and a label; the label set is read from the data."""

    def __call__(self, row: dict) -> Example:
        text = _text(row, "sentence" if "sentence" in row else "text")
        label = row.get("label")
        if label is None:
            raise RowError("missing field 'label'")
        return Example(input=text, target=str(label), label=-1, choices=(), references=(str(label),))


for _name, _kind, _family, _instruction, _metric, _hub in _HUB_ONLY:
    _normalize = Generation() if _kind == "generation" else HubClassification()
    _TASKS.append(Task(_name, _kind, _family, _instruction, _metric, _normalize, HubSource(_hub)))

REGISTRY: dict[str, Task] = {t.name: t for t in _TASKS}


def get_task(name: str) -> Task:
    """The registered task `name`, or a one-line UdrError listing the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UdrError(f"unknown task '{name}'; known tasks: {', '.join(sorted(REGISTRY))}") from None


def all_tasks() -> list[Task]:
    return list(REGISTRY.values())
