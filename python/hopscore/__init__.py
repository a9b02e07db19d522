"""hopscore: batch scoring of multi-hop passage chains for question answering.

Each job is built once per process (weights loaded once) and called per Arrow table or
record batch; its output and quarantine tables have exactly the schemas of the CLI's
Parquet files (``docs/cli.md``)::

    import pyarrow.parquet as pq, hopscore
    beam = hopscore.BeamRetriever("weights/beam-hotpot", device="cuda", beam_size=2)
    result = beam.process(pq.read_table("questions.parquet"))
    pq.write_table(result.rows, "chains.parquet")
    print(result.quarantine.to_pylist())   # bad rows with their reasons

Options are the CLI's flags with ``_`` for ``-`` (``beam_size=2`` is ``--beam-size 2``),
set by name on the job's config; ``None`` leaves an option at its default, the same one
the CLI has. An unknown option or a value of the wrong type raises ``ValueError`` naming
it. ``device`` is ``"cpu"`` or ``"cuda"``,
``gpu`` the CUDA ordinal, ``dtype`` ``"bf16"``, ``"f16"`` or ``"f32"`` (on the GPU),
``cpu_gemm`` ``"f32"`` (default), ``"bf16"``, ``"q8"`` or ``"int8"``: the arithmetic of
the dense layers on the CPU (``--cpu-gemm``; docs/cli.md gives the accuracy of each),
``cuda_graphs`` (default ``True``: each forward replayed as a CUDA graph) and
``batch_invariant`` (default ``True``: a row scores the same bits in any batch,
docs/data-safety.md) as ``--cuda-graphs`` and ``--batch-invariant`` on the GPU;
``gpu_kernels`` ``"proven"`` (default: per op, only kernels whose exact machine code has
passed parity on real hardware for the card, where a proven one exists) or ``"latest"``,
``attention`` (``"auto"``, ``"v3"``, ``"v5"``) and ``fused_gelu``,
``fused_gate``, ``fused_norm`` (``"auto"``, ``"on"``, ``"off"``) as the CLI's GPU kernel
flags (docs/cuda.md).
"""

import json
import os
from typing import Any, List, NamedTuple, Optional, Union

import pyarrow as pa

from hopscore import _cuda

_cuda.preload()  # before the native module first opens a CUDA library

from hopscore import _native  # noqa: E402

__version__ = _native.__version__
__all__ = [
    "Result",
    "Job",
    "BeamRetriever",
    "EfficientRAG",
    "Lepus",
    "Embedder",
    "CrossEncoder",
    "Reranker",
    "Retrieve",
    "CausalLM",
    "Review",
    "set_threads",
    "main",
]

set_threads = _native.set_threads
main = _native.main

#: What a job accepts: a table, a record batch, or any Arrow stream
#: (``__arrow_c_stream__``: polars, DuckDB, ``pyarrow.RecordBatchReader``).
Tabular = Union[pa.Table, pa.RecordBatch, Any]


class Result(NamedTuple):
    """A job's answer for one input: the output rows and the quarantined (bad) rows
    (``row``: 0-based position in the input, ``id``, ``reason``)."""

    rows: pa.Table
    quarantine: pa.Table


def _json(options: "dict[str, Any]") -> str:
    """The options as the native job reads them: a JSON object of option names and
    values (paths as strings); ``None`` leaves an option at its default."""
    def plain(v: Any) -> Any:
        if isinstance(v, os.PathLike):
            return os.fspath(v)
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return json.dumps({k: plain(v) for k, v in options.items() if v is not None})


def _options(call_locals: "dict[str, Any]") -> "dict[str, Any]":
    """A constructor's arguments as options (``self`` and ``__class__`` left out)."""
    return {k: v for k, v in call_locals.items() if k not in ("self", "__class__")}


class Job:
    """A scoring job: the CLI subcommand :attr:`command` with the given options,
    loaded once. Subclasses name the options each job takes.

    Every model and tokenizer option (``model``, ``tokenizer``, ``labeler``,
    ``filter``) takes a local path or a Hugging Face Hub id (``"org/name"``,
    ``"org/name@revision"``, ``"org/name:file.gguf"``), found in the cache
    ``huggingface_hub`` fills or downloaded into it (``HF_TOKEN``, ``HF_HUB_OFFLINE``,
    ``HF_ENDPOINT`` as in Python); a local path that exists always wins."""

    command = ""

    def __init__(self, **options: Any) -> None:
        self._job = _native.Job(self.command, _json(options))

    def process(self, data: Tabular) -> Result:
        """Scores every row of ``data`` (rows numbered from 0 in ``Result.quarantine``).
        A bad row never raises: it lands in the quarantine table with its reason. An
        input without a column the job reads raises ``ValueError``; a device failure
        ``RuntimeError``."""
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        rows, quarantine = self._job.process(data)
        return Result(rows, quarantine)

    __call__ = process


#: A local path, or a hub id (``"org/name[@revision][:file]"``) as a string.
Path = Union[str, "os.PathLike[str]"]


class BeamRetriever(Job):
    """Beam Retrieval over question tables (``hopscore beam``): chains, scores and
    features. Defaults: ``beam_size=2``, ``hops="from-data"``, ``tau=-1.0``,
    ``max_hops=4``, ``max_batch_tokens=16384``, ``max_active=64``."""

    command = "beam"

    def __init__(self, model: Path, *, tokenizer: Optional[Path] = None, beam_size: Optional[int] = None,
                 hops: Optional[str] = None, tau: Optional[float] = None, max_hops: Optional[int] = None,
                 max_batch_tokens: Optional[int] = None, max_active: Optional[int] = None,
                 device: str = "cpu", gpu: Optional[int] = None, dtype: Optional[str] = None,
                 cpu_gemm: Optional[str] = None, cuda_graphs: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None,
                 gpu_kernels: Optional[str] = None, attention: Optional[str] = None,
                 fused_gelu: Optional[str] = None, fused_gate: Optional[str] = None,
                 fused_norm: Optional[str] = None,
                 threads: Optional[int] = None) -> None:
        super().__init__(**_options(locals()))


class EfficientRAG(Job):
    """EfficientRAG over question tables (``hopscore label``): Labeler tags and kept
    text, Filter queries. Defaults: ``tag_pooling="cls"``, BM25 over each question's
    passages unless ``corpus`` names a corpus file; ``retriever="dense"`` embeds each
    query with the bi-encoder ``encoder`` (after ``query_prefix``), over ``corpus``
    through its ``embed`` vectors ``index`` (a list of files)."""

    command = "label"

    def __init__(self, labeler: Path, filter: Path, *, tokenizer: Optional[Path] = None,
                 corpus: Optional[Path] = None, tag_pooling: Optional[str] = None,
                 max_iter: Optional[int] = None, top_k: Optional[int] = None,
                 retriever: Optional[str] = None, encoder: Optional[Path] = None,
                 index: Optional["list[Path]"] = None, query_prefix: Optional[str] = None,
                 max_batch_tokens: Optional[int] = None, max_active: Optional[int] = None,
                 device: str = "cpu", gpu: Optional[int] = None, dtype: Optional[str] = None,
                 cpu_gemm: Optional[str] = None, cuda_graphs: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None,
                 gpu_kernels: Optional[str] = None, attention: Optional[str] = None,
                 fused_gelu: Optional[str] = None, fused_gate: Optional[str] = None,
                 fused_norm: Optional[str] = None,
                 threads: Optional[int] = None) -> None:
        super().__init__(**_options(locals()))


class Lepus(Job):
    """LEPUS reranking of each question's passages with a causal LM or a T5-family
    encoder-decoder (``model``: its directory or GGUF file), or BM25 with
    ``scorer="bm25"`` (``hopscore lepus``). Defaults: ``first_hops=5``,
    ``second_hops=3``, ``max_doc_tokens=230``, ``max_prompt_tokens=600``,
    ``temperature=1.0``, ``ensemble="mean"``, ``path_ensemble="mean"``. In-context
    demonstrations: ``demos`` (the official demos JSON), ``demo_ids=[[0, 1]]`` (one list
    per ensemble member), ``truncate_demos``, ``demo_max_doc_tokens=100``,
    ``demo_max_prompt_tokens=1024``."""

    command = "lepus"

    def __init__(self, model: Optional[Path] = None, *, tokenizer: Optional[Path] = None,
                 scorer: Optional[str] = None, templates: Optional[Path] = None,
                 num_templates: Optional[int] = None, instruction_position: Optional[str] = None,
                 ensemble: Optional[str] = None, path_ensemble: Optional[str] = None,
                 first_hops: Optional[int] = None, second_hops: Optional[int] = None,
                 title: bool = False, max_doc_tokens: Optional[int] = None,
                 max_prompt_tokens: Optional[int] = None, temperature: Optional[float] = None,
                 min_shared_prefix: Optional[int] = None, demos: Optional[Path] = None,
                 demo_ids: Optional["list[list[int]]"] = None, truncate_demos: bool = False,
                 demo_max_doc_tokens: Optional[int] = None, demo_max_prompt_tokens: Optional[int] = None,
                 max_batch_tokens: Optional[int] = None,
                 max_active: Optional[int] = None, device: str = "cpu", gpu: Optional[int] = None,
                 dtype: Optional[str] = None, cpu_gemm: Optional[str] = None,
                 cuda_graphs: Optional[bool] = None, batch_invariant: Optional[bool] = None,
                 gpu_kernels: Optional[str] = None, attention: Optional[str] = None,
                 fused_gelu: Optional[str] = None, fused_gate: Optional[str] = None,
                 fused_norm: Optional[str] = None,
                 threads: Optional[int] = None) -> None:
        super().__init__(**_options(locals()))


class CrossEncoder(Job):
    """A cross-encoder (DeBERTa, BERT, XLM-RoBERTa) scoring (id, text_a, text_b) rows
    (``hopscore classify``); :meth:`classify` is :meth:`process`. Default
    ``max_batch_tokens=16384``; ``max_length`` defaults to the model's."""

    command = "classify"

    def __init__(self, model: Path, *, tokenizer: Optional[Path] = None, head: Optional[str] = None,
                 max_batch_tokens: Optional[int] = None, max_length: Optional[int] = None,
                 device: str = "cpu", gpu: Optional[int] = None, dtype: Optional[str] = None,
                 cpu_gemm: Optional[str] = None, cuda_graphs: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None,
                 gpu_kernels: Optional[str] = None, attention: Optional[str] = None,
                 fused_gelu: Optional[str] = None, fused_gate: Optional[str] = None,
                 fused_norm: Optional[str] = None,
                 threads: Optional[int] = None) -> None:
        super().__init__(**_options(locals()))

    classify = Job.process


class Reranker(Job):
    """Each question's passage pool reranked by a cross-encoder (``hopscore rerank``):
    BERT (``cross-encoder/ms-marco-*``), XLM-RoBERTa (``BAAI/bge-reranker-v2-m3``),
    ModernBERT (``Alibaba-NLP/gte-reranker-modernbert-base``) or DeBERTa; or by an LLM
    reranker (a Qwen3 / Qwen2 / Llama decoder:
    ``Qwen/Qwen3-Reranker-*`` and its ``*-seq-cls`` conversions) through ``template``
    (default ``"qwen3-reranker"``), ``instruction`` and ``label_tokens`` (default the
    template's, ``["no", "yes"]``). The output is the question table with each pool in
    score order and the scores in ``rerank_scores``, which the other jobs read as they
    read ``retrieve``'s. Defaults: every passage kept (``top_k``),
    ``title_separator=" "``, the model's activation (sigmoid for one label),
    ``max_length`` the model's (8192 for a template), ``max_batch_tokens=16384``,
    ``max_active=64``."""

    command = "rerank"

    def __init__(self, model: Path, *, tokenizer: Optional[Path] = None, head: Optional[str] = None,
                 label: Optional[int] = None, template: Optional[str] = None,
                 instruction: Optional[str] = None, label_tokens: Optional[list[str]] = None,
                 top_k: Optional[int] = None,
                 title_separator: Optional[str] = None, max_length: Optional[int] = None,
                 max_batch_tokens: Optional[int] = None, max_active: Optional[int] = None,
                 device: str = "cpu", gpu: Optional[int] = None, dtype: Optional[str] = None,
                 cpu_gemm: Optional[str] = None, cuda_graphs: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None,
                 gpu_kernels: Optional[str] = None, attention: Optional[str] = None,
                 fused_gelu: Optional[str] = None, fused_gate: Optional[str] = None,
                 fused_norm: Optional[str] = None,
                 threads: Optional[int] = None) -> None:
        super().__init__(**_options(locals()))


class Embedder(Job):
    """A BERT-family bi-encoder (MiniLM, Contriever, E5, BGE) embedding (id, text[,
    title]) rows (``hopscore embed``); :meth:`embed` is :meth:`process`. Pooling,
    normalisation and truncation default to the model directory's sentence-transformers
    files; ``max_batch_tokens=4096``."""

    command = "embed"

    def __init__(self, model: Path, *, tokenizer: Optional[Path] = None, pooling: Optional[str] = None,
                 normalize: Optional[bool] = None, max_length: Optional[int] = None, prefix: Optional[str] = None,
                 float16: bool = False, max_batch_tokens: Optional[int] = None,
                 device: str = "cpu", gpu: Optional[int] = None, dtype: Optional[str] = None,
                 cpu_gemm: Optional[str] = None, cuda_graphs: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None,
                 gpu_kernels: Optional[str] = None, attention: Optional[str] = None,
                 fused_gelu: Optional[str] = None, fused_gate: Optional[str] = None,
                 fused_norm: Optional[str] = None,
                 threads: Optional[int] = None) -> None:
        super().__init__(**_options(locals()))

    embed = Job.process


class Retrieve(Job):
    """Candidate pools for question tables from a passage corpus (``hopscore retrieve``):
    dense (exact inner product over an ``embed`` index of the corpus, queries embedded
    by ``encoder``), BM25 over the corpus, or both fused by reciprocal rank. Each
    question comes back with its top-``k`` passages as ``passages`` (gold labels carried
    over by passage) and their scores, in pool order, in ``retrieval_scores``; a question
    without an id or a text is quarantined. The index is checked and the corpus read
    when the job is built. Defaults: ``retriever="dense"``, ``k=20``,
    ``fusion_depth=100``, ``question_rows=4096``."""

    command = "retrieve"

    def __init__(self, corpus: Path, *, index: Optional[List[Path]] = None, encoder: Optional[Path] = None,
                 tokenizer: Optional[Path] = None, query_prefix: str = "", pooling: Optional[str] = None,
                 normalize: Optional[bool] = None, retriever: str = "dense", k: Optional[int] = None,
                 fusion_depth: Optional[int] = None, question_rows: Optional[int] = None,
                 device: str = "cpu", gpu: Optional[int] = None, dtype: Optional[str] = None,
                 cpu_gemm: Optional[str] = None, cuda_graphs: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None,
                 gpu_kernels: Optional[str] = None, attention: Optional[str] = None,
                 fused_gelu: Optional[str] = None, fused_gate: Optional[str] = None,
                 fused_norm: Optional[str] = None,
                 threads: Optional[int] = None) -> None:
        super().__init__(**_options(locals()))

    retrieve = Job.process


class CausalLM(Job):
    """Log-likelihoods of (id, prompt, target) rows' targets under a causal LM, or a
    T5-family encoder-decoder reading the prompt as its encoder input
    (``hopscore loglik``); :meth:`loglik` is :meth:`process`. Defaults:
    ``temperature=1.0``, ``max_batch_tokens=8192``."""

    command = "loglik"

    def __init__(self, model: Path, *, tokenizer: Optional[Path] = None,
                 temperature: Optional[float] = None, min_shared_prefix: Optional[int] = None,
                 max_batch_tokens: Optional[int] = None, max_length: Optional[int] = None,
                 device: str = "cpu", gpu: Optional[int] = None, dtype: Optional[str] = None,
                 cpu_gemm: Optional[str] = None, cuda_graphs: Optional[bool] = None,
                 batch_invariant: Optional[bool] = None,
                 gpu_kernels: Optional[str] = None, attention: Optional[str] = None,
                 fused_gelu: Optional[str] = None, fused_gate: Optional[str] = None,
                 fused_norm: Optional[str] = None,
                 threads: Optional[int] = None) -> None:
        super().__init__(**_options(locals()))

    loglik = Job.process


class Review(Job):
    """The LLM post-stage over question tables (``hopscore review``): Tree of Reviews
    (``strategy="tor"``) or ALLIES (``"allies"``) against the OpenAI-compatible
    ``endpoint`` serving ``llm_model``. A question whose calls fail for good is an
    output row with ``status="failed"``. Responses are cached only in a directory
    ``cache`` names (the CLI's default cache sits next to its output file; ``no_cache=True``
turns it off). Defaults:
    ``concurrency=4``, ``timeout=120.0``, ``max_retries=8``, ``temperature=0.0``,
    ``max_tokens=512``; ToR ``depth=3``, ``widths=[5, 3, 3]``, ``expansion="mpc"``;
    ALLIES ``beam_size=2``, ``beam_depth=2``, ``sub_questions=2``, ``top_n=2``,
    ``threshold=0.8``."""

    command = "review"

    def __init__(self, strategy: str, endpoint: str, llm_model: str, *,
                 chains: Optional[Path] = None, corpus: Optional[Path] = None,
                 api_key_env: Optional[str] = None, concurrency: Optional[int] = None,
                 cache: Optional[Path] = None, no_cache: bool = False, timeout: Optional[float] = None,
                 max_retries: Optional[int] = None, backoff: Optional[float] = None,
                 backoff_max: Optional[float] = None, temperature: Optional[float] = None,
                 max_tokens: Optional[int] = None, depth: Optional[int] = None,
                 widths: Optional["list[int]"] = None, expansion: Optional[str] = None,
                 no_relevance_pruning: bool = False, no_repetitive_pruning: bool = False,
                 beam_size: Optional[int] = None, beam_depth: Optional[int] = None,
                 sub_questions: Optional[int] = None, top_n: Optional[int] = None,
                 threshold: Optional[float] = None) -> None:
        super().__init__(**_options(locals()))

    review = Job.process
