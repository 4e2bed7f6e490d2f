"""The model card of a `udr export`, written from the run's own files: params.yaml (models, training),
the prepared data's meta.json (tasks, sources, counts) and metrics/results.md (results with their n and
bootstrap intervals)."""

from __future__ import annotations

import json
from pathlib import Path

USAGE = """```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("{where}")
# Queries and demonstrations go through their own encoders; the task's instruction is a named prompt.
# A plain model.encode() raises (no default side): tools that call .encode need encode_query / encode_document.
query = model.encode_query([{query!r}], prompt_name="{task}")
demos = model.encode_document(["{demo}"], prompt_name="{task}")
print(model.similarity(query, demos))
```

```python
from udr import Retriever

retriever = Retriever.load("{where}")  # a udr export loads like a udr model
own = retriever.add_pool([{{"input": {demo_input!r}, "target": {demo_output!r}}}], instruction={instruction!r})
print(retriever.retrieve({query!r}, task=own, k=1))
```

```python
# LangChain (pip install 'udr[langchain]'): a few-shot prompt with UDR's demonstrations, most similar last.
from langchain_core.prompts import FewShotPromptTemplate
from udr.serving.langchain_selector import UDRExampleSelector

selector = UDRExampleSelector(retriever, instruction={instruction!r}, k=1,
                              examples=[{{"input": {demo_input!r}, "output": {demo_output!r}}}])
prompt = FewShotPromptTemplate(example_selector=selector, example_prompt=selector.example_prompt,
                               suffix=selector.suffix, input_variables=["input"], example_separator="")
print(prompt.format(input={query!r}))
```

```python
# DSPy (pip install 'udr[dspy]'): a predictor whose demos UDR retrieves for each call.
import dspy
from udr.serving.dspy_fewshot import UDRFewShot

program = UDRFewShot(dspy.Predict("question -> answer"), retriever, instruction={instruction!r}, k=1,
                     trainset=[dspy.Example(question={demo_input!r}, answer={demo_output!r})])
print([demo.answer for demo in program.demonstrations({query!r})])
```"""


def _yaml_front_matter(base: str) -> str:
    lines = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity"]
    lines += ["tags:", "- sentence-transformers", "- udr", "- in-context-learning", "- demonstration-retrieval"]
    if "/" in base and not base.startswith(("pypi:", "/", ".")):
        lines.append(f"base_model: {base}")
    return "\n".join([*lines, "---", ""])


def _task_rows(settings) -> list[str]:
    rows = [
        "| task | role | kind | instruction | template | pool (train rows) | test rows | source |",
        "| --- | --- | --- | --- | --- | ---: | ---: | --- |",
    ]
    unseen = set(settings.unseen_task_names())
    for name in settings.prepared_task_names():
        task = settings.task(name)
        meta_path = settings.paths.prepared_dir(name) / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        counts = meta.get("counts", {})
        role = "unseen (evaluated only)" if name in unseen else "trained on"
        template = task.template.replace("\t", "\\t")
        rows.append(
            f"| {name} | {role} | {task.kind} | `{task.instruction}` | `{template}` | "
            f"{counts.get('train', {}).get('kept', '?')} | {counts.get('test', {}).get('kept', '?')} | "
            f"{meta.get('source', task.source.describe())} |"
        )
    return rows


def _examples(settings, task: str) -> list[tuple[str, str]]:
    """Two (input, target) rows of a task's prepared pool, for the usage snippets."""
    from udr.data.prepare import read_prepared

    if not settings.paths.prepared(task, "train").is_file():
        return [("a query", "an answer"), ("a demonstration", "its answer")]
    rows = read_prepared(settings.root, task, "train").head(2).to_dicts()
    return [(r["input"], r["target"]) for r in rows] * (2 if len(rows) == 1 else 1)


def model_card(settings, model_dir: Path, where: str) -> str:
    """The README.md of an export of the bi-encoder at `model_dir`, for the project of `settings`;
    `where` is how its usage snippets name the export (a path or a hub id)."""
    from udr.retriever.encoder import BiEncoder

    encoder = BiEncoder.load_settings(model_dir)
    train = settings.train
    first = settings.prepared_task_names()[0]
    first_task = settings.task(first)
    example = _examples(settings, first)
    results = settings.paths.results
    lines = [
        _yaml_front_matter(settings.models.encoder),
        "# UDR demonstration retriever",
        "",
        "A Unified Demonstration Retriever ([Li et al., 2023](https://arxiv.org/abs/2305.04320)) trained with "
        "udr: one bi-encoder that retrieves in-context demonstrations for many tasks, "
        "trained on a language model's own feedback (which candidate demonstrations raise the likelihood of "
        "the gold answer), with a list-wise rank loss and an in-batch loss.",
        "",
        "## Model",
        "",
        f"- **Base encoder**: `{settings.models.encoder}` ({encoder.pooling} pooling, {encoder.similarity} "
        "similarity); two copies, one for queries (E_q) and one for demonstrations (E_d), as a "
        "sentence-transformers `Router`.",
        f"- **Feedback LM**: `{settings.models.lm}` scored {settings.candidates.k} BM25 candidates for "
        f"{settings.score.queries_per_task} train queries per task.",
        f"- **Training**: rounds {', '.join(f'round{r}' for r in train.rounds)}; loss `{train.loss}` "
        f"(lambda {train.loss_lambda}), {train.candidates_per_query} candidates per query, batch "
        f"{train.batch_size}, lr {train.lr}, {train.epochs_first} epochs (later rounds {train.epochs_later}), "
        f"seed {settings.seed}.",
        f"- **Inputs**: queries up to {encoder.max_query_length} tokens, demonstrations up to "
        f"{encoder.max_demo_length}. A demonstration is rendered with its task's template and read after "
        "the task instruction"
        + (
            "; so is a query."
            if encoder.instruction and encoder.query_instruction
            else "; queries are read bare (no prompt_name on queries)."
        ),
        "",
        "## Tasks and data",
        "",
        *_task_rows(settings),
        "",
        "## Results",
        "",
    ]
    if results.is_file():
        text = results.read_text().replace("# In-context learning results", "").replace("# Unseen tasks", "### Unseen")
        lines += [text.replace("\n## ", "\n### ").strip(), ""]
    else:
        lines += ["No evaluation was found beside the model (metrics/results.md): run `dvc repro`.", ""]
    lines += [
        "## Limitations",
        "",
        "- Small test sets: read differences through the paired bootstrap intervals above, not the point "
        "estimates; a difference is real only where its interval excludes 0.",
        f"- The feedback came from one small LM (`{settings.models.lm}`); what it rewards (often a "
        "demonstration sharing the query's label) may not carry over to other LMs.",
        "- Retrieval is within one task's pool; give each task's demonstrations with that task's "
        "instruction (prompt) and template, as above.",
        "- Trained on the tasks above only; other tasks are out of its training distribution (see the "
        "unseen tasks, where there are any).",
        "",
        "## Usage",
        "",
        USAGE.format(
            where=where,
            task=first,
            query=example[0][0],
            demo=first_task.render(*example[1]).replace("\t", "\\t").replace('"', '\\"'),
            demo_input=example[1][0],
            demo_output=example[1][1],
            instruction=first_task.instruction,
        ),
        "",
    ]
    return "\n".join(lines)
