"""Saved runs → questions → the :class:`~dpbench.decision.model.Decision`, computed once.

The configurations frame (:func:`dpbench.decision.configs.configurations`) holds one row per
measured case per run. Its training cases are grouped into questions by workload and recipe
(optimizer, precision, global batch): the sharding suite's AdamW cases are their own question with
their own ``single`` where one ran, and the weak-scaling suite's per-replica batch is its own
question. Knob sweeps (bucket sizes, comm hooks, reshard modes) share their strategy's recipe and
rank inside its question. Each workload is answered from the newest run that has it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import pandas as pd

from dpbench.decision.claims import CLAIM_LEVEL, LEVEL_MARGIN
from dpbench.decision.configs import joules_per_sample, throughputs
from dpbench.decision.contention import CONTENDED
from dpbench.decision.model import Answer, Decision, Entry, Question, answer_question

__all__ = ["decide", "question_of", "training_rows"]

_RECIPE_OPTIONS = re.compile(r"(?:optimizer|precision)=[^,()]*(?:, )?")


def training_rows(configs: pd.DataFrame) -> pd.DataFrame:
    """The configurations that trained a workload and measured a throughput."""
    if configs.empty or "workload" not in configs:
        return configs.iloc[0:0]
    kind = configs["kind"].fillna("training") if "kind" in configs else pd.Series("training", index=configs.index)
    rows = configs[(kind != "collective") & configs["workload"].notna()]
    return rows[pd.to_numeric(rows["samples_per_s"], errors="coerce") > 0]


def _text(row: pd.Series, column: str) -> str:
    value = row.get(column)
    return value if isinstance(value, str) else ""


def question_of(row: pd.Series) -> Question:
    """The question a saved configuration answers: its workload at the recipe its run recorded
    (an optimizer or precision it did not record stays '': the file does not say)."""
    recorded = {"optimizer": _text(row, "optimizer"), "precision": _text(row, "precision")}
    return Question.of(workload=str(row["workload"]), global_batch=row.get("batch"), options=recorded)


def _name(row: pd.Series) -> str:
    """The configuration's name inside its question: what the question states (the batch, the
    optimizer and precision) is not repeated: ``ddp(optimizer=adamw) w2 · batch 64`` → ``ddp w2``."""
    name = str(row["case"]).split(" · batch ")[0]
    return _RECIPE_OPTIONS.sub("", name).replace(", )", ")").replace("()", "")


def _memory(row: pd.Series) -> float:
    peaks = [v for k, v in row.items() if str(k).startswith("peak_memory_bytes.") and isinstance(v, (int, float))]
    peaks = [v for v in peaks if v == v and v > 0]
    return max(peaks) if peaks else math.nan


def _entry(row: pd.Series, name: str, departs: str) -> Entry:
    ws = row.get("world_size")
    busy = row.get("foreign_cpu")
    return Entry(
        name=name,
        strategy=str(row["strategy"]),
        world_size=int(ws) if isinstance(ws, (int, float)) and ws == ws else None,
        throughputs=tuple(throughputs(row)),
        busy_share=float(busy) if isinstance(busy, (int, float)) else math.nan,
        departs=departs,
        memory_bytes=_memory(row),
        joules_per_sample=tuple(joules_per_sample(row)),
    )


def decide(
    configs: pd.DataFrame,
    runs: Sequence[str],
    *,
    departures: Mapping[tuple[str, str], str],
    level: float = CLAIM_LEVEL,
    margin: float = LEVEL_MARGIN,
    busy_limit: float = CONTENDED,
) -> Decision:
    """Every question of ``configs`` (the configurations frame), each on the newest of ``runs``
    that measured its workload. ``departures``: (run, case) → why its fingerprint departs from
    single's (:func:`dpbench.results.fingerprint.departures`), left out of the ranking and said. It
    has no default, so no caller ranks a configuration that computes something else by forgetting
    it; ``{}`` says that nothing was checked.

    A run measured until settled records, per case, the looks its design split the level over
    (``claim_looks``, :mod:`dpbench.decision.sequential`): a question whose cases carry them is
    answered with the level split over them too (the most where they differ). A run saved by an
    earlier design recorded the level of its last look instead (``claim_level``): it looked after
    every pass from its first look on, so its looks are counted as its case's trials, which are at
    least as many."""
    rows = training_rows(configs)
    answers: list[Answer] = []
    notes: list[str] = []
    for workload in dict.fromkeys(rows["workload"].astype(str)):
        present = rows[rows["workload"].astype(str) == workload]
        run = [r for r in runs if (present["run"] == r).any()][-1]  # the newest run that has it
        group = present[present["run"] == run]
        questions: dict[Question, list[Entry]] = {}
        looks: dict[Question, int] = {}
        for _, row in group.iterrows():
            q = question_of(row)
            # A run's session records one design for every case; were they to differ, the most looks.
            looks[q] = max(looks.get(q, 1), _looks(row))
            names = {e.name for e in questions.get(q, [])}
            name = _name(row)
            name = name if name not in names else str(row["case"])  # two suites' variants that read alike
            questions.setdefault(q, []).append(_entry(row, name, departures.get((run, str(row["case"])), "")))
        # The question with the most configurations first (the workload's main one), then by batch.
        ordered = sorted(questions.items(), key=lambda kv: (-len(kv[1]), -_finite(kv[0].global_batch)))
        for q, entries in ordered:
            answer = answer_question(
                q, entries, run=run, busy_limit=busy_limit, level=level, looks=looks[q], margin=margin
            )
            if answer.single is None and len(entries) > 1:
                notes.append(f"{q.title}: no single configuration at this recipe; ranked among themselves")
            answers.append(answer)
    return Decision(answers=tuple(answers), level=level, margin=margin, notes=tuple(notes))


def _looks(row: pd.Series) -> int:
    """The looks a saved case's design split the level over (1: a fixed number of trials)."""
    looks = row.get("claim_looks")
    if isinstance(looks, (int, float)) and math.isfinite(looks) and looks >= 1:
        return int(looks)
    legacy = row.get("claim_level")
    if isinstance(legacy, (int, float)) and math.isfinite(legacy):
        return max(len(throughputs(row)), 1)
    return 1


def _finite(value: float) -> float:
    return value if math.isfinite(value) else -math.inf
