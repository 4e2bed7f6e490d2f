"""Task metrics: accuracy, macro-F1, exact match (+ token F1), BLEU, ROUGE and SARI, all in percent (0-100).

Every task in :mod:`udr.data.tasks` names one metric; :func:`metric_result` maps that name to a function
here and returns ``{"metric", "score", "n", "graded", ...}``. What each name computes:

``accuracy``
    Classification and multiple choice. A prediction is a label index (compared with the row's
    ``label``) or a string (compared with the row's ``target``, the verbaliser / chosen option text,
    after stripping). The published code does the same.
``macro_f1``
    Classification and multiple choice, for imbalanced label sets where always answering the majority
    label scores a high accuracy: the F1 of each class (one-vs-rest, labels compared as accuracy
    compares them), averaged with equal weight over the classes that occur as a gold or a predicted
    label (scikit-learn's ``f1_score(average="macro")``, a class with no true or false positive scoring
    0). ``details`` gives the accuracy too.
``exact_match``
    Semantic parsing (MTOP, SMCalFlow, BREAK). Prediction and reference are normalised (strip,
    collapse runs of whitespace to one space, lowercase) and compared; the best reference counts.
    The paper scores BREAK with LF-EM (the BREAK evaluator's logical-form equivalence, which
    normalises QDMR programs further); this is the simple normalised string EM for all three.
    A 135M LM gets ~0 EM on these tasks, so ``graded`` is :func:`token_f1` (see below): the score
    to average over tasks and to compare methods with.
``bleu``
    Corpus BLEU-4 from sacrebleu (13a tokenisation, case-sensitive, sacrebleu's default ``exp``
    smoothing), with all of a row's references (E2E / DART have several; rows may have different
    numbers of references: the shorter reference streams are padded with ``None``, which sacrebleu
    skips). ``details`` also gives corpus BLEU-1..4 (the published code reports BLEU-1/2 for code
    and BLEU-3/4 for CommonGen) and ``sentence_bleu_smoothed``: the mean sentence BLEU-4 with
    add-one smoothing of the 2..4-gram precisions (Lin & Och 2004, what CodeXGLUE's ``smooth_bleu``
    does for code summarisation; here with sacrebleu's 13a tokeniser, so not digit-identical to it).
    The main score is corpus BLEU-4 for every BLEU task, code included.
``rouge``
    Summaries. ``rouge_score`` with the Porter stemmer; per example the best reference (by
    F-measure), mean over examples. Main score ROUGE-L F; ``details`` has ROUGE-1/2/L F.
``sari``
    Simplification (WikiAuto). SARI of Xu et al. (2016) with 4-grams, in the tensor2tensor / HF
    ``evaluate`` variant (0/0 counts as 1, fixed keep recall), on lowercased 13a-tokenised text;
    the sources are the rows' ``input``. No maintained PyPI package ships SARI without pulling a
    hub download, so this one is written here and checked against ``evaluate``'s published example.

Errors (no predictions, length mismatch, an example without references, an unknown metric) raise
:class:`udr.errors.UdrError` with a one-line message.

Imports of numpy, sacrebleu and rouge_score are inside the functions that use them, to keep the start of `udr` and
of its commands light; sacrebleu and rouge_score are in the `pipeline` extra.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from udr.data.tasks import METRICS  # every metric name a task can declare; each is implemented here
from udr.errors import UdrError

_WORD = re.compile(r"\w+")


# ---------------------------------------------------------------- input checks


def _check_lengths(predictions: Sequence, others: Sequence, what: str) -> int:
    if len(predictions) == 0:
        raise UdrError("no predictions to score (empty list)")
    if len(predictions) != len(others):
        raise UdrError(f"{len(predictions)} predictions but {len(others)} {what}")
    return len(predictions)


def _check_texts(predictions: Sequence, what: str = "prediction") -> list[str]:
    out = []
    for i, p in enumerate(predictions):
        if not isinstance(p, str):
            raise UdrError(f"{what} {i} must be a string, got {type(p).__name__}")
        out.append(p)
    return out


def _check_references(references: Sequence) -> list[list[str]]:
    """Each entry a non-empty list of strings (a bare string counts as one reference)."""
    out = []
    for i, refs in enumerate(references):
        refs = [refs] if isinstance(refs, str) else list(refs) if refs is not None else []
        if not refs:
            raise UdrError(f"example {i} has no reference")
        if not all(isinstance(r, str) for r in refs):
            raise UdrError(f"example {i}: references must be strings")
        out.append(refs)
    return out


def _prepare(predictions: Sequence, references: Sequence) -> tuple[list[str], list[list[str]]]:
    _check_lengths(predictions, references, "references")
    return _check_texts(predictions), _check_references(references)


def _f1(precision: float, recall: float) -> float:
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------- accuracy and exact match


def _label_key(x: Any) -> str:
    return str(x).strip()


def accuracy(predictions: Sequence[int | str], golds: Sequence[int | str]) -> float:
    """Percent of predictions equal to their gold (labels compared as stripped strings)."""
    n = _check_lengths(predictions, golds, "golds")
    return 100.0 * sum(_label_key(p) == _label_key(g) for p, g in zip(predictions, golds)) / n


def _class_counts(predictions: Sequence, golds: Sequence):
    """Per example, one-hot true positives, false positives and false negatives of each class (the
    classes: every gold or predicted label), as an (n, 3 * classes) array whose column sums give F1."""
    import numpy as np

    pairs = [(_label_key(p), _label_key(g)) for p, g in zip(predictions, golds)]
    classes = {c: i for i, c in enumerate(sorted({c for pair in pairs for c in pair}))}
    k = len(classes)
    counts = np.zeros((len(pairs), 3 * k), dtype=np.float64)
    for row, (p, g) in enumerate(pairs):
        if p == g:
            counts[row, classes[p]] = 1  # a true positive of the class
        else:
            counts[row, k + classes[p]] = 1  # a false positive of the predicted class
            counts[row, 2 * k + classes[g]] = 1  # a false negative of the gold one
    return counts


def _macro_f1_of_counts(summed) -> float:
    """Macro F1 (percent) of summed :func:`_class_counts`, over the classes that occur in them."""
    k = len(summed) // 3
    tp, fp, fn = summed[:k], summed[k : 2 * k], summed[2 * k :]
    present = [c for c in range(k) if tp[c] + fp[c] + fn[c] > 0]
    f1 = [2 * tp[c] / (2 * tp[c] + fp[c] + fn[c]) for c in present]
    return 100.0 * sum(f1) / len(f1) if f1 else 0.0


def macro_f1(predictions: Sequence[int | str], golds: Sequence[int | str]) -> float:
    """Macro-averaged F1 (percent) over the classes that occur as a gold or predicted label."""
    _check_lengths(predictions, golds, "golds")
    return _macro_f1_of_counts(_class_counts(predictions, golds).sum(axis=0))


def normalize_text(text: str) -> str:
    """Strip, collapse every run of whitespace to one space, lowercase."""
    return " ".join(text.split()).lower()


def exact_match(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    normalize: Callable[[str], str] | None = normalize_text,
) -> float:
    """Percent of predictions equal to one of their references after `normalize` (None: raw)."""
    preds, refs = _prepare(predictions, references)
    norm = normalize or (lambda s: s)
    hits = sum(norm(p) in {norm(r) for r in rs} for p, rs in zip(preds, refs))
    return 100.0 * hits / len(preds)


def _f1_tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _token_f1_one(prediction: str, reference: str) -> float:
    pred, ref = _f1_tokens(prediction), _f1_tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    return _f1(common / len(pred), common / len(ref))


def token_f1(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """SQuAD-style bag-of-tokens F1, best reference per example, mean over examples, percent.

    Tokens are the lowercased text's runs of word characters (``\\w+``: letters, digits, ``_``), so
    punctuation and brackets are dropped (they would reward any bracket soup in a logical form)
    and ``IN:GET_WEATHER`` gives ``in``, ``get_weather``. Unlike SQuAD, articles are kept (in
    logical forms they can be values). Both empty: 1; one empty: 0.
    """
    preds, refs = _prepare(predictions, references)
    total = sum(max(_token_f1_one(p, r) for r in rs) for p, rs in zip(preds, refs))
    return 100.0 * total / len(preds)


# ---------------------------------------------------------------- BLEU


def _reference_streams(refs: list[list[str]]) -> list[list[str | None]]:
    """sacrebleu wants one stream per reference position; short rows are padded with None."""
    width = max(len(r) for r in refs)
    return [[r[k] if k < len(r) else None for r in refs] for k in range(width)]


def bleu(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    max_order: int = 4,
    smooth: str = "exp",
    tokenize: str = "13a",
    lowercase: bool = False,
) -> float:
    """Corpus BLEU-`max_order` (sacrebleu), all references of every example, percent.

    `smooth` is a sacrebleu ``smooth_method``: ``exp`` (default, mteval-v13a), ``add-k``
    (add one to the n>1 counts), ``floor`` or ``none``.
    """
    from sacrebleu.metrics import BLEU

    preds, refs = _prepare(predictions, references)
    metric = BLEU(max_ngram_order=max_order, smooth_method=smooth, tokenize=tokenize, lowercase=lowercase)
    return float(metric.corpus_score(preds, _reference_streams(refs)).score)


def sentence_bleu_mean(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    max_order: int = 4,
    smooth: str = "add-k",
    tokenize: str = "13a",
    lowercase: bool = False,
) -> float:
    """Mean of per-example smoothed sentence BLEU (default: add-one on 2..4-grams, as CodeXGLUE)."""
    from sacrebleu.metrics import BLEU

    # sacrebleu warns on every sentence that effective_order is off; off is what CodeXGLUE computes.
    logging.getLogger("sacrebleu").setLevel(logging.ERROR)
    preds, refs = _prepare(predictions, references)
    metric = BLEU(max_ngram_order=max_order, smooth_method=smooth, tokenize=tokenize, lowercase=lowercase)
    return sum(float(metric.sentence_score(p, rs).score) for p, rs in zip(preds, refs)) / len(preds)


# ---------------------------------------------------------------- ROUGE


def rouge(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    types: Sequence[str] = ("rouge1", "rouge2", "rougeL"),
) -> dict[str, float]:
    """ROUGE F-measures (rouge_score, Porter stemming), best reference per type, mean, percent."""
    from rouge_score import rouge_scorer

    preds, refs = _prepare(predictions, references)
    scorer = rouge_scorer.RougeScorer(list(types), use_stemmer=True)
    totals = dict.fromkeys(types, 0.0)
    for p, rs in zip(preds, refs):
        scores = scorer.score_multi(rs, p)
        for t in types:
            totals[t] += scores[t].fmeasure
    return {t: 100.0 * v / len(preds) for t, v in totals.items()}


def rouge_l(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """ROUGE-L F-measure (LCS, stemmed), best reference per example, mean over examples, percent."""
    return rouge(predictions, references, ("rougeL",))["rougeL"]


# ---------------------------------------------------------------- SARI


def _sari_tokens(text: str) -> list[str]:
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()(text.lower()).split()


def _ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _sari_order(source: list, output: list, refs: list[list]) -> tuple[float, float, float]:
    """(keep F1, deletion precision, addition F1) for one n-gram order; 0/0 counts as 1."""
    k = len(refs)
    ref_counts = Counter(g for r in refs for g in r)
    src = Counter({g: c * k for g, c in Counter(source).items()})
    out = Counter({g: c * k for g, c in Counter(output).items()})

    kept = src & out
    kept_good = kept & ref_counts
    kept_all = src & ref_counts
    keep_p = sum(kept_good[g] / kept[g] for g in kept_good) / len(kept) if kept else 1.0
    keep_r = sum(kept_good.values()) / sum(kept_all.values()) if kept_all else 1.0

    deleted = src - out
    deleted_good = deleted - ref_counts
    del_p = sum(deleted_good[g] / deleted[g] for g in deleted_good) / len(deleted) if deleted else 1.0

    added = set(out) - set(src)
    added_good = added & set(ref_counts)
    added_all = set(ref_counts) - set(src)
    add_p = len(added_good) / len(added) if added else 1.0
    add_r = len(added_good) / len(added_all) if added_all else 1.0
    return _f1(keep_p, keep_r), del_p, _f1(add_p, add_r)


def _sari_sentence(source: str, output: str, refs: list[str], max_order: int = 4) -> float:
    s, o, rs = _sari_tokens(source), _sari_tokens(output), [_sari_tokens(r) for r in refs]
    parts = [_sari_order(_ngrams(s, n), _ngrams(o, n), [_ngrams(r, n) for r in rs]) for n in range(1, max_order + 1)]
    keep, delete, add = (sum(p[i] for p in parts) / max_order for i in range(3))
    return (keep + delete + add) / 3


def sari(sources: Sequence[str], predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Mean sentence SARI (4-grams; keep F1, deletion precision, addition F1), percent."""
    preds, refs = _prepare(predictions, references)
    _check_lengths(preds, sources, "sources")
    srcs = _check_texts(sources, "source")
    return 100.0 * sum(_sari_sentence(s, p, r) for s, p, r in zip(srcs, preds, refs)) / len(preds)


# ---------------------------------------------------------------- dispatch


def _field(example: Any, name: str, default: Any = None) -> Any:
    if isinstance(example, Mapping):
        return example.get(name, default)
    return getattr(example, name, default)


def _example_references(example: Any) -> list[str]:
    refs = _field(example, "references")
    if refs is None or len(refs) == 0:
        target = _field(example, "target")
        refs = [target] if target is not None else []
    return list(refs)


def _accuracy_pairs(predictions: Sequence, examples: Sequence) -> tuple[list, list]:
    """Index predictions are compared with `label`, text predictions with `target`."""
    preds, golds = [], []
    for i, (p, ex) in enumerate(zip(predictions, examples)):
        label, target = _field(ex, "label", -1), _field(ex, "target")
        is_index = isinstance(p, int) and not isinstance(p, bool)
        if is_index and isinstance(label, int) and label >= 0:
            gold = label
        elif target is not None:
            gold = target
        else:
            raise UdrError(f"example {i} has neither a label nor a target to compare with")
        preds.append(p)
        golds.append(gold)
    return preds, golds


def graded_score(metric_name: str, predictions: Sequence, examples: Sequence) -> float:
    """The graded score alone (what :func:`metric_result` reports as ``graded``): :class:`GradedStatistics`
    of every example."""
    import numpy as np

    return GradedStatistics(metric_name, predictions, examples).score(np.arange(len(predictions)))


class GradedStatistics:
    """Per-example sufficient statistics of a task's graded score: the graded score of any subset of
    the examples (a bootstrap resample, repeats allowed) is :meth:`score` of their row indices, equal
    to :func:`graded_score` on that subset, without tokenising or matching anything again.

    Corpus BLEU keeps sacrebleu's per-segment counts (matches and totals per n-gram order, hypothesis
    and closest reference lengths), whose sum is what sacrebleu's ``corpus_score`` scores; every other
    graded score is a mean of per-example scores.
    """

    def __init__(self, metric_name: str, predictions: Sequence, examples: Sequence):
        import numpy as np

        if metric_name not in METRICS:
            raise UdrError(f"unknown metric '{metric_name}'; known metrics: {', '.join(METRICS)}")
        _check_lengths(predictions, examples, "examples")
        self._bleu = None
        self._macro_f1 = metric_name == "macro_f1"
        if self._macro_f1:
            self.stats = _class_counts(*_accuracy_pairs(predictions, examples))
            return
        if metric_name == "accuracy":
            preds, golds = _accuracy_pairs(predictions, examples)
            values = [float(_label_key(p) == _label_key(g)) for p, g in zip(preds, golds)]
        else:
            preds, refs = _prepare(predictions, [_example_references(ex) for ex in examples])
            if metric_name == "bleu":
                from sacrebleu.metrics import BLEU

                self._bleu = BLEU(max_ngram_order=4, smooth_method="exp", tokenize="13a", lowercase=False)
                streams = _reference_streams(refs)
                self.stats = np.asarray(self._bleu._extract_corpus_statistics(preds, streams), dtype=np.int64)
                return
            if metric_name == "exact_match":
                values = [max(_token_f1_one(p, r) for r in rs) for p, rs in zip(preds, refs)]
            elif metric_name == "rouge":
                from rouge_score import rouge_scorer

                scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
                values = [scorer.score_multi(rs, p)["rougeL"].fmeasure for p, rs in zip(preds, refs)]
            else:  # sari
                sources = _check_texts([_field(ex, "input") for ex in examples], "source")
                values = [_sari_sentence(s, p, rs) for s, p, rs in zip(sources, preds, refs)]
        self.stats = np.asarray(values, dtype=np.float64)[:, None]

    def score(self, indices) -> float:
        """The graded score of the examples at `indices`."""
        rows = self.stats[indices]
        if self._macro_f1:
            return _macro_f1_of_counts(rows.sum(axis=0))
        if self._bleu is not None:
            return float(self._bleu._compute_score_from_stats([int(x) for x in rows.sum(axis=0)]).score)
        # Summed in index order, as the metric functions do, so the numbers are bit-identical.
        return 100.0 * sum(rows[:, 0].tolist()) / len(rows)


def metric_result(metric_name: str, predictions: Sequence, examples: Sequence) -> dict:
    """Score `predictions` against `examples` (Example objects or prepared rows) with a task's metric.

    Returns ``{"metric": name, "score": float, "n": int, "graded": {"name", "score"}}`` plus
    ``details`` for BLEU and ROUGE. ``graded`` is the number to average over tasks: the main score,
    except for exact match, where it is token F1.
    """
    if metric_name not in METRICS:
        raise UdrError(f"unknown metric '{metric_name}'; known metrics: {', '.join(METRICS)}")
    n = _check_lengths(predictions, examples, "examples")
    result: dict[str, Any] = {"metric": metric_name, "n": n}
    if metric_name == "accuracy":
        score = accuracy(*_accuracy_pairs(predictions, examples))
    elif metric_name == "macro_f1":
        pairs = _accuracy_pairs(predictions, examples)
        score = macro_f1(*pairs)
        result["details"] = {"accuracy": accuracy(*pairs)}
    else:
        refs = [_example_references(ex) for ex in examples]
        if metric_name == "exact_match":
            score = exact_match(predictions, refs)
            result["graded"] = {"name": "token_f1", "score": token_f1(predictions, refs)}
        elif metric_name == "bleu":
            score = bleu(predictions, refs)
            details = {f"bleu_{k}": bleu(predictions, refs, max_order=k) for k in (1, 2, 3)}
            details["bleu_4"] = score
            details["sentence_bleu_smoothed"] = sentence_bleu_mean(predictions, refs)
            result["details"] = details
        elif metric_name == "rouge":
            scores = rouge(predictions, refs)
            score = scores["rougeL"]
            result["details"] = {"rouge_1": scores["rouge1"], "rouge_2": scores["rouge2"], "rouge_l": score}
        else:  # sari
            sources = [_field(ex, "input") for ex in examples]
            score = sari(sources, predictions, refs)
    result["score"] = float(score)
    result.setdefault("graded", {"name": metric_name, "score": float(score)})
    return result


def label_share(demo_ids: Sequence[Sequence[int]], rows: Sequence[Mapping], labels: Mapping[int, int]) -> float | None:
    """The share (0 to 1) of a prompt's demonstrations whose gold label is its query's: `demo_ids` per
    evaluated row, `rows` the rows (their ``label``), `labels` each pool id's gold label; averaged over the
    rows whose prompt has demonstrations, None where none has any. Classification and multiple choice."""
    _check_lengths(demo_ids, rows, "rows")
    shares = [
        sum(int(labels[int(d)]) == int(row["label"]) for d in ids) / len(ids) for ids, row in zip(demo_ids, rows) if ids
    ]
    return sum(shares) / len(shares) if shares else None
