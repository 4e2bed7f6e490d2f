"""Multi-task list-wise ranking training of the bi-encoder (one round of the paper's Algorithm 1).

Every optimiser step takes `train.batch_size` scored queries from ONE task, the task drawn with
p(T) ~ q_T^alpha (q_T = T's share of the scored queries); each query brings l candidates sampled
from its LM-ranked list and ranked 1..l by the LM's scores. The loss is :class:`udr.retriever.losses.UDRLoss`.
The batch is processed in micro-batches of `train.micro_batch` queries with gradient accumulation
(in-batch negatives are the micro-batch's candidates).

Determinism and resume: everything random in step s (task, queries, candidates, dropout) is drawn
from generators seeded by (seed, round, s), so a run resumed from a checkpoint continues exactly as
an uninterrupted one. Under torchrun, process r computes micro-batches r, r+P, ... and gradients are
summed across processes before the step (data parallel), which equals the one-process step up to
float summation order.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from udr.errors import UdrError
from udr.util.distributed import Distributed, resolve_device_type
from udr.util.files import write_text_atomic

TOP_BOTTOM = 5  # the published scheme's and EPR's "top 5" / "bottom 5"


@dataclass(frozen=True)
class ScoredQuery:
    """A training query with its candidates in LM order (best first)."""

    task: str
    query_id: int
    text: str
    candidate_ids: tuple[int, ...]
    candidate_texts: tuple[str, ...]


class TaskSampler:
    """Draws a task with p(T_i) = q_i^alpha / sum_j q_j^alpha, q_i = n_i / sum_j n_j (paper, eq. for p(T_i))."""

    def __init__(self, sizes: Mapping[str, int], alpha: float):
        if not sizes or any(n <= 0 for n in sizes.values()):
            raise UdrError(f"no training data: every task needs scored queries, got {dict(sizes)}")
        self.tasks = sorted(sizes)
        q = np.array([sizes[t] for t in self.tasks], dtype=np.float64)
        q /= q.sum()
        p = q**alpha
        self.probabilities = p / p.sum()

    def draw(self, rng: np.random.Generator) -> str:
        return self.tasks[int(rng.choice(len(self.tasks), p=self.probabilities))]


def sample_candidates(n: int, l: int, scheme: str, rng: np.random.Generator) -> list[int]:
    """Positions (0 = the LM's best) of the candidates used for one query in one step, in LM order.

    uniform: min(l, n) at random; published: one of the top 5, one of the bottom 5, the rest from
    the middle (topped up from anywhere unused when the middle is short); epr: one of the top 5 and
    one of the bottom 5 (EPR's positive and hard negative).
    """
    if n < 2:
        raise UdrError("a query needs at least 2 scored candidates")
    if scheme == "uniform":
        return sorted(rng.choice(n, size=min(l, n), replace=False).tolist())
    top = int(rng.integers(min(TOP_BOTTOM, n)))
    bottom_pool = [i for i in range(max(0, n - TOP_BOTTOM), n) if i != top]
    bottom = int(rng.choice(bottom_pool))
    if scheme == "epr":
        return sorted([top, bottom])
    if scheme != "published":
        raise UdrError(f"bad parameter train.sampling: unknown scheme {scheme!r}")
    chosen = {top, bottom}
    middle = [i for i in range(TOP_BOTTOM, n - TOP_BOTTOM) if i not in chosen]
    want = min(l, n) - 2
    take = rng.choice(len(middle), size=min(want, len(middle)), replace=False).tolist() if middle else []
    chosen |= {middle[i] for i in take}
    rest = [i for i in range(n) if i not in chosen]
    if len(chosen) < min(l, n):
        chosen |= {rest[i] for i in rng.choice(len(rest), size=min(l, n) - len(chosen), replace=False).tolist()}
    return sorted(chosen)


def step_rng(seed: int, round_: int, step: int, purpose: str = "batch") -> np.random.Generator:
    from udr.data.prepare import task_rng

    return task_rng(seed, f"train-it{round_}", f"{purpose}-{step}")


def load_scored_queries(root: Path, tasks: Sequence[str], iteration: int, encoder_cfg) -> dict[str, list[ScoredQuery]]:
    """Each task's scored queries of `iteration` with their candidates as encoder texts, LM order."""
    import polars as pl

    from udr.data.prepare import read_prepared
    from udr.data.tasks import get_task
    from udr.feedback.score import scores_path
    from udr.retriever.encoder import query_text
    from udr.retriever.index import pool_texts

    out: dict[str, list[ScoredQuery]] = {}
    for name in tasks:
        task = get_task(name)
        path = scores_path(root, iteration, name)
        if not path.is_file():
            raise UdrError(f"missing scores {path}: run `udr score --iteration {iteration}` first")
        scores = pl.read_parquet(path).sort(["query_id", "rank"])
        rows = {r["id"]: r for r in read_prepared(root, name, "train").iter_rows(named=True)}
        queries = []
        for (qid,), group in scores.group_by(["query_id"], maintain_order=True):
            cids = tuple(int(c) for c in group["candidate_id"])
            if len(cids) < 2:
                continue
            q = rows[int(qid)]
            queries.append(
                ScoredQuery(
                    name,
                    int(qid),
                    query_text(task.instruction, q["input"], encoder_cfg),
                    cids,
                    tuple(
                        pool_texts(
                            name, [rows[c]["input"] for c in cids], [rows[c]["target"] for c in cids], encoder_cfg
                        )
                    ),
                )
            )
        out[name] = queries
    return out


@dataclass
class TrainSummary:
    iteration: int
    steps: int
    queries: dict
    task_probabilities: dict
    loss_start: float
    loss_end: float
    seconds: float
    world_size: int
    device: str


def _mean(xs: Sequence[float]) -> float:
    return round(float(np.mean(xs)), 6) if len(xs) else float("nan")


def epr_settings(settings):
    """The EPR baseline's recipe on UDR's budget: round-0 (BM25) scores only, one positive of the
    top 5 and one hard negative of the bottom 5 per query, the in-batch (DPR) loss alone, and as
    many epochs as all of UDR's rounds together; same encoder init, batch, lr and inputs."""
    cfg = settings.train
    epochs = cfg.epochs_first + cfg.epochs_later * len(cfg.later_rounds)
    train = cfg.model_copy(update={"sampling": "epr", "loss": "paper", "loss_lambda": 0.0, "epochs_first": epochs})
    return settings.model_copy(update={"train": train})


def run_train(
    settings,
    iteration: int,
    *,
    init: Path,
    out: Path,
    log_dir: Path,
    progress: bool = True,
    stop_after_steps: int | None = None,
) -> TrainSummary | None:
    """Train one round from `init` (a base encoder directory, or a saved bi-encoder) into `out`.

    Per-step losses go to `log_dir` (dvclive) with `summary.json` and `loss.png`; a checkpoint
    beside `out` (``.<name>.partial``) is written every `train.checkpoint_steps` steps and picked
    up by the next run with the same inputs. Returns None on processes other than rank 0 and when
    `stop_after_steps` stopped the run early (tests use it to simulate a kill).
    """
    import torch

    from udr.feedback.score import scores_path
    from udr.retriever.encoder import SETTINGS_NAME, BiEncoder, BiEncoderSettings
    from udr.retriever.losses import UDRLoss
    from udr.util.files import file_sha256
    from udr.util.progress import progress_bar

    cfg = settings.train
    root = settings.root
    tasks = settings.training_tasks()
    start = time.perf_counter()
    data = load_scored_queries(root, tasks, iteration, settings.encoder)
    sampler = TaskSampler({t: len(q) for t, q in data.items()}, cfg.alpha)
    total_queries = sum(len(q) for q in data.values())
    steps = max(
        1, math.ceil((cfg.epochs_first if iteration == 0 else cfg.epochs_later) * total_queries / cfg.batch_size)
    )
    l = 2 if cfg.sampling == "epr" else cfg.candidates_per_query

    device_type = resolve_device_type(cfg.device, "train.device")
    dp = Distributed(device_type)
    device = torch.device(f"cuda:{dp.local_rank}" if device_type == "cuda" else "cpu")

    partial = out.with_name(f".{out.name}.partial")
    fingerprint = {
        "iteration": iteration,
        "steps": steps,
        "seed": settings.seed,
        "tasks": tasks,
        "train": cfg.model_dump(exclude={"checkpoint_steps", "device"}),
        "encoder": settings.encoder.model_dump(),
        "scores": {t: file_sha256(scores_path(root, iteration, t)) for t in tasks},
        "init": _describe_init(Path(init)),
        "world": dp.world,
    }
    state = _read_checkpoint(partial, fingerprint)
    bi_settings = BiEncoderSettings(**settings.encoder.model_dump(), base=str(settings.models.encoder))
    if state is not None:
        encoder = BiEncoder.load(partial / "encoder")
    elif (Path(init) / SETTINGS_NAME).is_file():
        encoder = BiEncoder.load(init)
        encoder.settings = bi_settings
    else:
        encoder = BiEncoder.from_base(init, bi_settings)
    encoder.to(device).train()
    params = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    from transformers import get_linear_schedule_with_warmup

    scheduler = get_linear_schedule_with_warmup(optimizer, min(cfg.warmup_steps, steps), steps)
    history: list[dict] = []
    first = 0
    if state is not None:
        opt_state = torch.load(partial / "optimizer.pt", map_location=device, weights_only=True)
        optimizer.load_state_dict(opt_state["optimizer"])
        scheduler.load_state_dict(opt_state["scheduler"])
        history, first = state["history"], state["step"]
    loss_fn = UDRLoss(cfg.loss_lambda, cfg.loss)
    live = _Log(log_dir, history) if dp.rank == 0 else None
    autocast = torch.autocast(device_type, dtype=torch.bfloat16, enabled=device_type == "cuda")

    with progress_bar(progress and dp.rank == 0, "loss {task.fields[loss]:.4f}") as bar:
        job = bar.add_task(
            f"training round {iteration}",
            total=steps,
            completed=first,
            loss=history[-1]["loss"] if history else float("nan"),
        )
        for step in range(first, steps):
            rng = step_rng(settings.seed, iteration, step)
            task = sampler.draw(rng)
            pool = data[task]
            chosen = rng.choice(len(pool), size=min(cfg.batch_size, len(pool)), replace=False)
            picks = [(pool[i], sample_candidates(len(pool[i].candidate_ids), l, cfg.sampling, rng)) for i in chosen]
            micro = [picks[i : i + cfg.micro_batch] for i in range(0, len(picks), cfg.micro_batch)]
            optimizer.zero_grad(set_to_none=True)
            parts = np.zeros(3)
            for m, mb in enumerate(micro):
                if m % dp.world != dp.rank:
                    continue
                torch.manual_seed(settings.seed * 1_000_003 + iteration * 10_007 + step * 101 + m)
                with autocast:
                    q = encoder.embed([sq.text for sq, _ in mb], "query")
                    width = max(len(pos) for _, pos in mb)
                    texts, mask, ranks = [], [], []
                    for sq, pos in mb:
                        texts += [sq.candidate_texts[p] for p in pos]
                        mask.append([True] * len(pos) + [False] * (width - len(pos)))
                        ranks.append(list(range(1, len(pos) + 1)) + [0] * (width - len(pos)))
                    d = encoder.embed(texts, "demo")
                    flat_mask = torch.tensor(mask, device=device)
                    cand = torch.zeros(len(mb), width, d.shape[1], dtype=d.dtype, device=device)
                    cand[flat_mask] = d
                    loss = loss_fn(q.float(), cand.float(), torch.tensor(ranks, device=device), flat_mask)
                share = len(mb) / len(picks)
                (loss.total * share).backward()
                parts += share * np.array([loss.total.item(), loss.rank.item(), loss.in_batch.item()])
            dp.sum_gradients(params)
            optimizer.step()
            scheduler.step()
            record = {
                "step": step,
                "task": task,
                "loss": dp.sum_scalar(parts[0]),
                "rank": dp.sum_scalar(parts[1]),
                "in_batch": dp.sum_scalar(parts[2]),
                "lr": scheduler.get_last_lr()[0],
            }
            history.append(record)
            if live:
                live.log(record)
            bar.update(job, advance=1, loss=record["loss"])
            done = step + 1
            if dp.rank == 0 and (done % cfg.checkpoint_steps == 0 and done < steps):
                _write_checkpoint(partial, fingerprint, encoder, optimizer, scheduler, done, history)
            if stop_after_steps is not None and done - first >= stop_after_steps and done < steps:
                dp.barrier()
                return None

    dp.barrier()
    if dp.rank != 0:
        dp.close()
        return None
    encoder.to("cpu").train(False)
    encoder.save(out)
    losses = [h["loss"] for h in history]
    window = max(1, min(10, len(losses) // 5))
    summary = TrainSummary(
        iteration,
        steps,
        {t: len(q) for t, q in data.items()},
        {t: round(float(p), 4) for t, p in zip(sampler.tasks, sampler.probabilities)},
        _mean(losses[:window]),
        _mean(losses[-window:]),
        round(time.perf_counter() - start, 2),
        dp.world,
        device_type,
    )
    live.finish(summary)
    shutil.rmtree(partial, ignore_errors=True)
    dp.close()
    return summary


def _describe_init(init: Path) -> dict:
    for name in ("udr_encoder.json", "udr_model.json"):
        if (init / name).is_file():
            from udr.util.files import file_sha256

            return {
                "path": str(init),
                name: file_sha256(init / name),
                "weights": sorted(file_sha256(p) for p in init.rglob("*.safetensors")),
            }
    raise UdrError(f"missing model: {init} is neither a resolved base encoder nor a trained bi-encoder")


def _read_checkpoint(partial: Path, fingerprint: dict) -> dict | None:
    state_file = partial / "state.json"
    if not state_file.is_file():
        shutil.rmtree(partial, ignore_errors=True)
        return None
    try:
        state = json.loads(state_file.read_text())
    except json.JSONDecodeError:
        state = {}
    if state.get("fingerprint") != json.loads(json.dumps(fingerprint)):
        shutil.rmtree(partial, ignore_errors=True)
        return None
    return state


def _write_checkpoint(partial: Path, fingerprint: dict, encoder, optimizer, scheduler, step: int, history) -> None:
    """Weights, optimiser and scheduler state, step and loss history; state.json is written last,
    so a checkpoint without it (killed while saving) is ignored."""
    import torch

    (partial / "state.json").unlink(missing_ok=True)
    partial.mkdir(parents=True, exist_ok=True)
    encoder.save(partial / "encoder")
    tmp = partial / "optimizer.pt.tmp"
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp)
    os.replace(tmp, partial / "optimizer.pt")
    write_text_atomic(
        partial / "state.json", json.dumps({"fingerprint": fingerprint, "step": step, "history": history})
    )


class _Log:
    """dvclive per-step metrics under `log_dir` (replayed from the checkpoint's history on resume,
    so a resumed run's log equals an uninterrupted run's), plus summary.json and loss.png at the end."""

    def __init__(self, log_dir: Path, history: list[dict]):
        from dvclive import Live

        shutil.rmtree(log_dir, ignore_errors=True)
        self.dir = log_dir
        self.live = Live(str(log_dir), save_dvc_exp=False, dvcyaml=None, report=None)
        for record in history:
            self.log(record)

    def log(self, record: dict) -> None:
        self.live.step = record["step"]
        for key in ("loss", "rank", "in_batch", "lr"):
            self.live.log_metric(f"train/{key}", record[key], plot=True)
        self.live.next_step()

    def finish(self, summary: TrainSummary) -> None:
        self.live.end()
        write_text_atomic(self.dir / "summary.json", json.dumps(asdict(summary), indent=2) + "\n")
        plot_losses(self.dir, self.dir / "loss.png", f"training round {summary.iteration}")


def plot_losses(log_dir: Path, png: Path, title: str) -> None:
    """The training curve (total, rank and in-batch loss per step, with a moving average) as a PNG."""
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key in ("loss", "rank", "in_batch"):
        f = log_dir / "plots" / "metrics" / "train" / f"{key}.tsv"
        if not f.is_file():
            continue
        with f.open() as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        steps = [int(r["step"]) for r in rows]
        values = np.array([float(r[key]) for r in rows])
        w = max(1, len(values) // 20)
        smooth = np.convolve(values, np.ones(w) / w, mode="valid")
        (line,) = ax.plot(steps, values, alpha=0.25)
        ax.plot(steps[w - 1 :], smooth, color=line.get_color(), label=key if w == 1 else f"{key} (moving mean of {w})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    tmp = png.with_name(png.name + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, png)
