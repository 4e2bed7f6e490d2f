"""udr.retriever.mining: mined candidates are the previous round's exact top-k, self excluded."""

from __future__ import annotations

import numpy as np
import polars as pl

from tests.conftest import LOOP_TASKS as TASKS


def test_mining_is_exact_top_k_without_self(looped):
    """Mined candidates equal a brute-force ranking by round 0's retriever, self excluded."""
    from udr.data.prepare import read_prepared
    from udr.data.tasks import get_task
    from udr.retriever.encoder import BiEncoder, demo_texts, query_text

    root = looped
    enc = BiEncoder.load(root / "models/rounds/round0")
    for task in TASKS:
        pool = read_prepared(root, task, "train")
        ids = np.asarray(pool["id"].to_list())
        d = enc.encode(demo_texts(get_task(task), pool["input"], pool["target"], enc.settings), "demo")
        mined = pl.read_parquet(root / f"data/candidates/round1/{task}.parquet").filter(pl.col("rank").is_not_null())
        for (qid,), group in mined.group_by(["query_id"]):
            p = int(np.flatnonzero(ids == qid)[0])
            q = enc.encode([query_text(get_task(task).instruction, pool["input"][p], enc.settings)], "query")[0]
            sims = d @ q
            sims[p] = -np.inf
            order = np.lexsort((np.arange(len(ids)), -sims))[:4]
            got = group.sort("rank")["candidate_id"].to_list()
            assert qid not in got
            assert got == ids[order].tolist() or np.allclose(
                np.sort(sims[order]), np.sort(sims[[int(np.flatnonzero(ids == g)[0]) for g in got]]), atol=1e-5
            )
