"""Where a training step's candidate embeddings come from: E_d trained with E_q (:class:`TrainedDemoEncoder`),
or E_d frozen as it was initialised (:class:`FrozenDemoEncoder`, `train.freeze_demo_encoder`). The
trainer is built with one of them (:func:`udr.retriever.training.build_trainer`); both give a micro-batch's
candidate embeddings (B, width, d) in its :class:`udr.retriever.recipes.CandidateLayout`, and the in-batch
loss's negatives (None: the batch's own candidates).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from udr.errors import UdrError
from udr.retriever.index import embed_pool
from udr.retriever.losses import PoolNegatives


class TrainedDemoEncoder:
    """E_d learns: each micro-batch's candidates are embedded by it with gradient (`chunk` demonstrations
    per forward, cut from them sorted by length: `train.length_chunk`), and L_ib's negatives are the
    batch's candidates."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk

    def embed(self, encoder, texts: list[str]) -> Tensor:
        return encoder.embed(texts, "demo", chunk=self.chunk)

    def candidates(self, encoder, layout) -> tuple[Tensor, PoolNegatives | None]:
        return layout.pad(self.embed(encoder, layout.texts)).float(), None


@dataclass(frozen=True)
class TaskPool:
    """A task's pool embedded once by a frozen E_d: embeddings (N, d) on the training device, and each
    pool item's row by its id."""

    emb: Tensor
    row: dict[int, int]


class FrozenDemoEncoder:
    """E_d frozen as it was initialised: each training task's pool embedded once (no gradient, dropout
    off) when training starts, the candidates' embeddings read from that cache, and L_ib's softmax over
    the query's whole task pool (its own row left out), independent of the micro-batch."""

    def __init__(self, pools: dict[str, TaskPool]) -> None:
        self.pools = pools

    @classmethod
    def freeze(cls, encoder, pools: Mapping, batch_size: int, device) -> FrozenDemoEncoder:
        """Freeze `encoder`'s E_d and embed each pool ({task: (Task, its prepared train split)}) with it,
        `batch_size` texts a batch as every pool embedding is."""

        encoder.demo_model.requires_grad_(False).eval()
        cached = {}
        for name, (task, frame) in pools.items():
            emb = embed_pool(encoder, task, frame, batch_size, progress=False)
            row = {int(i): r for r, i in enumerate(frame["id"])}
            cached[name] = TaskPool(torch.from_numpy(emb).to(device), row)
        return cls(cached)

    def candidates(self, encoder, layout) -> tuple[Tensor, PoolNegatives]:
        device = layout.mask.device
        pool = self.pools[layout.picks[0][0].task]
        rows = torch.tensor([_pool_rows(pool, sq, pos, layout.width) for sq, pos in layout.picks], device=device)
        exclude = torch.tensor([pool.row.get(sq.query_id, -1) for sq, _ in layout.picks], device=device)
        return pool.emb[rows], PoolNegatives(pool.emb, rows, exclude)


def _pool_rows(pool: TaskPool, sq, positions, width: int) -> list[int]:
    """The pool rows of a query's sampled candidates, padded with row 0 to `width`."""
    try:
        rows = [pool.row[sq.candidate_ids[p]] for p in positions]
    except KeyError as exc:
        raise UdrError(f"{sq.task}: candidate {exc.args[0]} of query {sq.query_id} is not in the task's pool") from None
    return rows + [0] * (width - len(rows))
