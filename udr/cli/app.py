"""The `udr` Typer app, its shared options, and the entry point that turns a UdrError, or a notice, into one line.

Imports of rich, udr.config (pydantic), udr.paths and udr.util.progress are inside the functions that use them, to
keep `udr`'s start (`udr --help`) light.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from udr.errors import UdrError
from udr.util.notice import notices_on_stderr

if TYPE_CHECKING:
    from udr.config import Settings

app = typer.Typer(
    name="udr",
    help="Unified Demonstration Retriever: prepare data, score with an LM, train, mine, retrieve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ParamsOpt = Annotated[Path, typer.Option("--params", "-p", help="Parameters file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-S", help="Override a parameter: key.path=value (repeatable)."),
]
TaskOpt = Annotated[
    list[str] | None,
    typer.Option("--task", "-t", help="Only this task (repeatable); default: every task in params."),
]

OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out", help="A model directory of its own (e.g. models/news) instead of the pipeline's.", show_default=False
    ),
]
ReplaceOpt = Annotated[
    bool,
    typer.Option("--replace", help="Overwrite a model that another params file made (refused without it)."),
]
# How a user's own data file reads as a classification task (`udr init-task`, `udr adapt`).
InputColumnOpt = Annotated[
    str | None, typer.Option("--input", help="The input column (default: text, sentence, input, ...).")
]
LabelColumnOpt = Annotated[
    str | None, typer.Option("--label", help="The label column (default: label, target, class, ...).")
]
InstructionOpt = Annotated[
    str | None, typer.Option("--instruction", help="What UDR and the LM read before each input.")
]
TaskMetricOpt = Annotated[
    str | None, typer.Option("--metric", help="accuracy (default) or macro_f1, for imbalanced labels.")
]


def _parse_round(value: str) -> int:
    from udr.paths import parse_round

    try:
        return parse_round(value)
    except UdrError as exc:
        raise typer.BadParameter(str(exc)) from None


RoundOpt = Annotated[
    int,
    typer.Option(
        "--round",
        "-r",
        parser=_parse_round,
        metavar="N",
        help="Round of Algorithm 1 (0: BM25 candidates); 1 or round1.",
    ),
]


def unwrapped(text: str) -> str:
    """`text` with the line breaks inside its paragraphs joined (a docstring's wrapping is not the terminal's)."""
    paragraphs = [" ".join(line.strip() for line in p.splitlines()) for p in text.strip().split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def unwrap_help(typer_app: typer.Typer) -> None:
    """Give every command of `typer_app` (and of its sub-apps) its docstring as help, unwrapped: Typer
    keeps a docstring's line breaks, which then break lines in the middle of the terminal's."""
    for info in typer_app.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            info.help = unwrapped(inspect.getdoc(info.callback))
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            unwrap_help(group.typer_instance)


def console():
    """The console for messages (stderr; stdout carries results); a message is one line however long,
    so logs keep paths whole. Messages carry users' paths and names, so nothing in them is read as Rich
    markup (a folder named `x[/b]` prints as it is)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, markup=False)


def console_out():
    """The console for results (stdout), wrapping long lines at the terminal's width."""
    from rich.console import Console

    return Console(highlight=False)


def show_progress() -> bool:
    """Whether long stages report progress: a bar on a terminal, a line every $UDR_PROGRESS_SECONDS (30)
    seconds in a log or a pipe (:mod:`udr.util.progress`); UDR_PROGRESS_SECONDS=off silences both."""
    from udr.util.progress import PROGRESS_SECONDS_ENV

    return os.environ.get(PROGRESS_SECONDS_ENV, "").strip().lower() != "off"


def load(params: Path, overrides: list[str] | None):
    """The validated settings of a params file with `--set` overrides."""
    from udr.config import load_settings

    return load_settings(params, overrides or [])


def selected_tasks(settings: Settings, tasks: list[str] | None, *, unseen: bool = False) -> list[str]:
    """`--task` choices (checked against the project's tasks and params), or every task in params.
    `unseen`: the command also takes evaluate.unseen_tasks (prepare, evaluate); otherwise they are refused
    (an unseen task is never scored or trained on)."""
    allowed = settings.prepared_task_names() if unseen else settings.task_names()
    chosen = tasks or allowed
    for name in chosen:
        settings.task(name)
        if name in settings.evaluate.unseen_tasks and not unseen:
            raise UdrError(f"task '{name}' is in evaluate.unseen_tasks: it is never scored or trained on")
        if name not in allowed:
            where = "prepare.tasks or evaluate.unseen_tasks" if unseen else "prepare.tasks"
            raise UdrError(f"task '{name}' is not in {where} of the params file; add it there first")
    return chosen


# Top-level modules of the `pipeline` extra (pyproject.toml), which a serving install lacks.
PIPELINE_MODULES = frozenset(
    {"dvc", "matplotlib", "bm25s", "rank_bm25", "sacrebleu", "rouge_score", "gguf", "accelerate", "pyarrow"}
)

# click's exception classes as this Typer has them (Typer 0.2x vendors click), found from its public BadParameter.
USAGE_ERROR, CLICK_EXCEPTION = (
    next(c for c in typer.BadParameter.__mro__ if c.__name__ == name) for name in ("UsageError", "ClickException")
)


def main() -> None:
    """Console entry point: UdrError becomes one line on stderr and exit status 1; a bad option or argument
    one line, ``udr score: invalid value for ...``, and exit status 2; a notice
    (:class:`udr.util.notice.UdrNotice`) one line on stderr, ``udr: note: ...``."""
    try:
        with notices_on_stderr():
            code = app(standalone_mode=False)  # click's errors come here, not as its boxed usage text
    except USAGE_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `udr`, `udr exp`: the help (Typer printed it already)
            if exc.format_message().strip():
                print(exc.format_message(), file=sys.stderr)
        else:
            print(f"{exc.ctx.command_path if exc.ctx else 'udr'}: {_one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except CLICK_EXCEPTION as exc:
        print(f"udr: error: {_one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Abort:  # EOF or Ctrl-C at a prompt
        print("udr: aborted", file=sys.stderr)
        sys.exit(1)
    except UdrError as exc:
        print(f"udr: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("udr: interrupted", file=sys.stderr)
        sys.exit(130)
    except ModuleNotFoundError as exc:
        # `pip install udr` serves retrieval; the pipeline's libraries come with the `pipeline` extra.
        if (exc.name or "").split(".")[0] not in PIPELINE_MODULES:
            raise
        print(
            f"udr: error: this command needs the pipeline extra (missing module {exc.name}): "
            "pip install 'udr[pipeline]'",
            file=sys.stderr,
        )
        sys.exit(1)
    # `--help` returns 0; Ctrl-C in a command returns 130 (Typer turns it into an Exit, which it returns).
    if code == 130:
        print("udr: interrupted", file=sys.stderr)
    if isinstance(code, int) and code:
        sys.exit(code)


def _one_line(message: str) -> str:
    """A click message as the rest of one line, in udr's style (``No such option: -x.`` -> ``no such option: -x``)."""
    text = " ".join(line.strip() for line in message.splitlines() if line.strip()).removesuffix(".")
    return text[:1].lower() + text[1:]


if __name__ == "__main__":
    main()
