"""Ray Data: callable classes for ``Dataset.map_batches`` (``batch_format="pyarrow"``).

Each actor builds its job once (weights loaded once) and scores every batch it is
given; a pool of actors, one per GPU or any number of CPU actors, runs a question file
of any size on a cluster::

    import ray, hopscore.ray
    ds = ray.data.read_parquet("questions.parquet")
    out = ds.map_batches(hopscore.ray.Beam,
                         fn_constructor_kwargs=dict(model="weights/beam-hotpot"),
                         **hopscore.ray.actor_options(actors=4, device="cuda"))
    out.write_parquet("chains/")

A batch's output has the schema of the CLI's output file (``Retrieve``: plus
``retrieval_scores``, which the CLI writes to a file beside it). Bad rows never fail a batch:
with ``quarantine_dir`` each batch that has some writes them, as the CLI's quarantine
schema, to ``<quarantine_dir>/<uuid>.parquet`` (``row`` counts within the batch; ``id``
names the input row); without it they are logged as warnings.
"""

import logging
import os
import uuid
from typing import Any, Dict, Optional

import pyarrow as pa
import pyarrow.parquet as pq

import hopscore

log = logging.getLogger(__name__)


def actor_options(actors: int, device: str = "cpu", threads: int = 1) -> Dict[str, Any]:
    """``map_batches`` keyword arguments for a pool of ``actors`` actors: one GPU each
    with ``device="cuda"`` (make ``actors`` the number of GPUs), else ``threads`` CPUs
    each (pass the same ``threads`` to the class). Leave CPUs free for Ray's read and
    write tasks: with every CPU held by an actor, ``read_parquet`` never runs.

    The pool is ``compute=ray.data.ActorPoolStrategy(size=actors)``, as Ray documents
    it for callable classes (``concurrency=`` is deprecated since Ray 2.51)."""
    import ray.data

    if actors < 1:
        raise ValueError(f"actors must be at least 1, got {actors}")
    opts: Dict[str, Any] = {
        "batch_format": "pyarrow",
        "compute": ray.data.ActorPoolStrategy(size=actors),
    }
    if device == "cuda":
        opts["num_gpus"] = 1
    elif device == "cpu":
        opts["num_cpus"] = threads
    else:
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    return opts


class _Actor:
    """One job per actor process; ``__call__`` scores one batch."""

    job_class: type = hopscore.Job

    def __init__(self, *, quarantine_dir: Optional[str] = None, **job_options: Any) -> None:
        self.job = self.job_class(**job_options)
        self.quarantine_dir = quarantine_dir
        if quarantine_dir is not None:
            os.makedirs(quarantine_dir, exist_ok=True)

    def __call__(self, batch: pa.Table) -> pa.Table:
        result = self.job.process(batch)
        if result.quarantine.num_rows:
            self._quarantine(result.quarantine)
        return result.rows

    def _quarantine(self, bad: pa.Table) -> None:
        if self.quarantine_dir is None:
            for row in bad.to_pylist():
                log.warning("quarantined row %s (id %s): %s", row["row"], row["id"], row["reason"])
            return
        pq.write_table(bad, os.path.join(self.quarantine_dir, f"{uuid.uuid4().hex}.parquet"))


class Beam(_Actor):
    """Beam Retrieval: keyword arguments of :class:`hopscore.BeamRetriever`."""

    job_class = hopscore.BeamRetriever


class Label(_Actor):
    """EfficientRAG: keyword arguments of :class:`hopscore.EfficientRAG`."""

    job_class = hopscore.EfficientRAG


class Lepus(_Actor):
    """LEPUS: keyword arguments of :class:`hopscore.Lepus`."""

    job_class = hopscore.Lepus


class Classify(_Actor):
    """Cross-encoder scores of (id, text_a, text_b) rows: keyword arguments of
    :class:`hopscore.CrossEncoder`."""

    job_class = hopscore.CrossEncoder


class Rerank(_Actor):
    """Question pools reranked by a cross-encoder or an LLM reranker: keyword arguments of
    :class:`hopscore.Reranker`."""

    job_class = hopscore.Reranker


class Embed(_Actor):
    """Bi-encoder vectors of (id, text[, title]) rows: keyword arguments of
    :class:`hopscore.Embedder`."""

    job_class = hopscore.Embedder


class Retrieve(_Actor):
    """First-stage candidate pools (dense, BM25 or hybrid) for question batches: keyword
    arguments of :class:`hopscore.Retrieve` (each actor reads the corpus and opens the
    index once)."""

    job_class = hopscore.Retrieve


class Loglik(_Actor):
    """LM log-likelihoods (causal or T5) of (id, prompt, target) rows: keyword arguments of
    :class:`hopscore.CausalLM`."""

    job_class = hopscore.CausalLM


class Review(_Actor):
    """The LLM post-stage (Tree of Reviews or ALLIES): keyword arguments of
    :class:`hopscore.Review` (each actor makes its own ``concurrency`` calls at once)."""

    job_class = hopscore.Review
