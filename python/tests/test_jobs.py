"""Each job of the API, fed the table the CLI reads, gives the rows of the CLI's output
file (same columns, types, values and run metadata) and the rows of its quarantine
file."""

import inspect
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hopscore
from conftest import cli, cli_run, fixture, flags

#: name → (CLI command, API class, options, input fixture, id of the bad row)
CASES = {
    "beam": ("beam", hopscore.BeamRetriever, {"model": fixture("beam/model"), "beam_size": 2}, "questions"),
    "beam-q8": (
        "beam", hopscore.BeamRetriever, {"model": fixture("beam/model"), "beam_size": 2, "cpu_gemm": "q8"}, "questions"
    ),
    "label": (
        "label",
        hopscore.EfficientRAG,
        {"labeler": fixture("efficientrag/labeler"), "filter": fixture("efficientrag/filter")},
        "questions",
    ),
    "lepus-bm25": ("lepus", hopscore.Lepus, {"scorer": "bm25"}, "questions"),
    "lepus-lm": ("lepus", hopscore.Lepus, {"model": fixture("lepus/gpt2_bytes"), "first_hops": 3}, "questions"),
    "lepus-bf16": (
        "lepus", hopscore.Lepus, {"model": fixture("lepus/gpt2_bytes"), "first_hops": 3, "cpu_gemm": "bf16"},
        "questions",
    ),
    "lepus-demos": (
        "lepus",
        hopscore.Lepus,
        {"model": fixture("lepus/gpt2_bytes"), "first_hops": 2, "demos": fixture("lepus/demos.json"),
         "demo_ids": [[0, 1], [2, 3]], "truncate_demos": True, "demo_max_doc_tokens": 40,
         "demo_max_prompt_tokens": 1000, "max_doc_tokens": 100},
        "questions",
    ),
    "lepus-t5": (
        "lepus",
        hopscore.Lepus,
        {"model": fixture("t5/v1_1"), "first_hops": 2, "demos": fixture("lepus/demos.json"),
         "demo_ids": [[0, 1], [2, 3]], "truncate_demos": True, "demo_max_doc_tokens": 30,
         "demo_max_prompt_tokens": 470, "max_doc_tokens": 60},
        "questions",
    ),
    "classify": ("classify", hopscore.CrossEncoder, {"model": fixture("deberta/v3_seqcls")}, "pairs"),
    "rerank": ("rerank", hopscore.Reranker,
               {"model": fixture("rerank/bert_seqcls"), "tokenizer": fixture("rerank/wordpiece"),
                "max_length": 128, "top_k": 3}, "questions"),
    "rerank-llm": ("rerank", hopscore.Reranker,
                   {"model": fixture("rerank/qwen3_reranker"), "tokenizer": fixture("rerank/bpe"),
                    "instruction": "Find the passages of the answer", "label_tokens": ["no", "yes"],
                    "top_k": 4}, "questions"),
    "loglik": ("loglik", hopscore.CausalLM, {"model": fixture("lepus/gpt2_bytes")}, "loglik_rows"),
    "loglik-t5": ("loglik", hopscore.CausalLM, {"model": fixture("t5/v1_0")}, "loglik_rows"),
    "embed": ("embed", hopscore.Embedder, {"model": fixture("bert/random_plain"), "float16": True}, "passages"),
}
BAD_ID = {"questions": "bad-no-passages", "pairs": "bad-null", "loglik_rows": "bad-null", "passages": "bad-null"}
#: The tokenizer fixture of jobs whose model directory has no tokenizer.json.
TOKENIZER = {"beam": "tokenizer", "label": "tokenizer", "classify": "word_tokenizer", "embed": "word_tokenizer"}


def options(name: str, request) -> dict:
    command, _, opts, _ = CASES[name]
    if command not in TOKENIZER:
        return dict(opts)
    return dict(opts, tokenizer=request.getfixturevalue(TOKENIZER[command]))


#: Run metadata of a file run that describes the input file and the finished run
#: (``hopscore.run_fingerprint``, for resume), which a call of the API does not have.
#: The content of every other input path (``hopscore.sha256.<flag>``: model, tokenizer,
#: corpus) both carry.
FILE_KEYS = {b"hopscore.input_rows", b"hopscore.input_sha256", b"hopscore.shard",
             b"hopscore.run_fingerprint"}


def file_key(key: bytes) -> bool:
    return key in FILE_KEYS


def assert_same_table(api: pa.Table, cli: pa.Table) -> None:
    assert api.schema.equals(cli.schema, check_metadata=False), f"{api.schema}\n!=\n{cli.schema}"
    assert any(k.startswith(b"hopscore.") for k in cli.schema.metadata), "no run metadata"
    assert api.schema.metadata == {k: v for k, v in cli.schema.metadata.items() if not file_key(k)}
    assert api.num_rows == cli.num_rows
    assert api.to_pylist() == cli.to_pylist()


@pytest.mark.parametrize("name", list(CASES))
def test_api_rows_equal_the_cli_output(name, request, tmp_path):
    command, job_class, _, input_name = CASES[name]
    opts = options(name, request)
    input_path = request.getfixturevalue(input_name)
    cli_rows, cli_bad = cli_run(command, flags(opts), input_path, tmp_path)

    job = job_class(**opts)
    result = job.process(pq.read_table(input_path))

    assert_same_table(result.rows, cli_rows)
    assert_same_table(result.quarantine, cli_bad)
    # The model's (and a separate tokenizer's) bytes are named as the CLI names them.
    hashes = {k for k in result.rows.schema.metadata if k.startswith(b"hopscore.sha256.")}
    for flag in ("model", "tokenizer", "labeler", "filter"):
        if flag in opts:
            assert f"hopscore.sha256.{flag}".encode() in hashes, (flag, hashes)
    assert result.quarantine.column("id").to_pylist() == [BAD_ID[input_name]]
    assert result.quarantine.column("reason")[0].as_py()
    assert result.rows.num_rows == pq.read_metadata(input_path).num_rows - 1


def test_a_job_is_called_per_record_batch_and_numbers_rows_per_call(pairs, request):
    job = hopscore.CrossEncoder(**options("classify", request))
    table = pq.read_table(pairs)
    whole = job.process(table)
    for batch in table.to_batches(max_chunksize=2):
        part = job.process(batch)
        want = [r for r in whole.rows.to_pylist() if r["id"] in batch.column("id").to_pylist()]
        assert part.rows.to_pylist() == want
    # The bad row is the third of the table, the first of the second batch.
    assert whole.quarantine.column("row").to_pylist() == [2]
    assert job.process(table.slice(2)).quarantine.column("row").to_pylist() == [0]
    # Any Arrow stream (__arrow_c_stream__: polars, DuckDB, readers) is taken as well.
    stream = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=1))
    streamed = job.process(stream)
    assert streamed.rows.equals(whole.rows) and streamed.quarantine.equals(whole.quarantine)


def test_a_bad_input_schema_raises_naming_the_column(request):
    job = hopscore.CrossEncoder(**options("classify", request))
    with pytest.raises(ValueError, match="text_a"):
        job.process(pa.table({"id": ["x"], "text_b": ["y"]}))


def test_an_out_of_range_option_raises_naming_it():
    with pytest.raises(ValueError, match=r"--beam-size \(beam_size\) must be at least 1"):
        hopscore.BeamRetriever(fixture("beam/model"), beam_size=0)
    with pytest.raises(ValueError, match=r"--temperature \(temperature\) must be a positive number"):
        hopscore.CausalLM(fixture("lepus/gpt2_bytes"), temperature=0.0)


def test_an_unknown_option_or_a_value_of_the_wrong_type_raises_naming_it():
    with pytest.raises(ValueError, match="option `beam_size` of `beam`: invalid type"):
        hopscore.BeamRetriever(fixture("beam/model"), beam_size="two")
    with pytest.raises(ValueError, match="option `dtype` of the device"):
        hopscore.BeamRetriever(fixture("beam/model"), dtype="fp8")
    with pytest.raises(ValueError, match="`beam_width` is not an option of `beam`; its options are beam_size, hops, "):
        hopscore._native.Job("beam", '{"model": "m", "beam_width": 2}')



@pytest.mark.parametrize("job_class", hopscore.Job.__subclasses__(), ids=lambda c: c.__name__)
def test_each_class_takes_every_option_of_its_command_with_its_default(job_class):
    # The native module lists the command's options (its config's and, for a job that
    # runs a model, the device's) with the CLI's defaults: a class lacking one, naming
    # one the command lacks, or defaulting to another value fails here. A class's
    # default is the CLI's, or None (the CLI's, left to the native side).
    native = json.loads(hopscore._native.options(job_class.command))
    params = dict(inspect.signature(job_class.__init__).parameters)
    params.pop("self")
    assert sorted(params) == sorted(native["defaults"])
    required = [n for n, p in params.items() if p.default is inspect.Parameter.empty]
    assert sorted(required) == sorted(native["required"])
    for name, p in params.items():
        if p.default is inspect.Parameter.empty or p.default is None:
            continue
        assert p.default == native["defaults"][name], name


def test_the_gpu_switches_are_options_of_the_device(questions, request):
    # On the CPU they are accepted and change nothing; a wrong type names the option.
    table = pq.read_table(questions)
    default = hopscore.BeamRetriever(**options("beam", request)).process(table)
    switched = hopscore.BeamRetriever(**options("beam", request), cuda_graphs=False, batch_invariant=False,
                                      gpu_kernels="latest", attention="v3", fused_gelu="off", fused_gate="on",
                                      fused_norm="auto")
    assert switched.process(table).rows.equals(default.rows)
    with pytest.raises(ValueError, match="option `cuda_graphs` of the device"):
        hopscore.BeamRetriever(fixture("beam/model"), cuda_graphs="maybe")
    with pytest.raises(ValueError, match="option `gpu_kernels` of the device"):
        hopscore.BeamRetriever(fixture("beam/model"), gpu_kernels="newest")


def test_a_pandas_round_trip_of_a_question_file_is_accepted(questions, request):
    """Issue 26: pandas turns an always-empty list column into ``list<null>`` (and an
    integer column with nulls into float64); the API took neither."""
    pd = pytest.importorskip("pandas")
    table = pq.read_table(questions)
    frame = table.to_pandas()
    frame.loc[0, "hops"] = None  # a nullable int column: float64 in pandas
    round_trip = pa.Table.from_pandas(frame, preserve_index=False)
    assert pa.types.is_null(round_trip.schema.field("issues").type.value_type)
    assert pa.types.is_floating(round_trip.schema.field("hops").type)
    job = hopscore.Lepus(scorer="bm25")
    direct, again = job.process(table), job.process(round_trip)
    assert again.rows.to_pylist() == direct.rows.to_pylist()
    assert again.quarantine.column("id").to_pylist() == ["bad-no-passages"]
    assert isinstance(frame, pd.DataFrame)


def test_text_that_is_not_valid_utf8_goes_to_the_quarantine(word_tokenizer):
    """Issue 40: ``Embedder.embed`` embedded text whose bytes are not UTF-8 (an array
    built from raw buffers; Arrow does not check arrays that cross the C data
    interface), which the CLI quarantines. The row goes to the quarantine naming the
    column; the others are embedded."""
    pieces = [b"w5 w6", b"w7 \xff w8", b"w9 w10"]
    ends = [0]
    for p in pieces:
        ends.append(ends[-1] + len(p))
    offsets = pa.array(ends, pa.int32()).buffers()[1]
    text = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"".join(pieces))])
    table = pa.table({"id": ["p0", "p1", "p2"], "text": text})
    job = hopscore.Embedder(fixture("bert/random_plain"), tokenizer=word_tokenizer)
    rows, bad = job.embed(table)
    assert rows.column("id").to_pylist() == ["p0", "p2"]
    assert bad.to_pylist() == [
        {"row": 1, "id": "p1", "reason": "column `text` holds bytes that are not valid UTF-8"}
    ]
    valid = job.embed(pa.table({"id": ["p0", "p2"], "text": ["w5 w6", "w9 w10"]})).rows
    assert rows.column("embedding").to_pylist() == valid.column("embedding").to_pylist()


def test_jobs_in_one_process_keep_their_own_thread_counts(word_tokenizer):
    """Issue 40: ``threads=0`` was accepted, and a job with ``threads=1`` after one
    with another count raised "global thread pool has already been initialized". Each
    job runs in a pool of its own size."""
    passages = pa.table({"id": ["a", "b"], "text": ["w5 w6", "w7 w8 w9"]})
    model = fixture("bert/random_plain")
    two = hopscore.Embedder(model, tokenizer=word_tokenizer, threads=2).embed(passages)
    one = hopscore.Embedder(model, tokenizer=word_tokenizer, threads=1).embed(passages)
    assert one.rows.equals(two.rows)
    with pytest.raises(ValueError, match=r"\(threads\) must be at least 1"):
        hopscore.Embedder(model, tokenizer=word_tokenizer, threads=0)


def test_retrieve_gives_the_clis_pools_and_scores(questions, corpus, tmp_path):
    # BM25 (no encoder): the rows of `hopscore retrieve`'s question file, and its scores
    # file's scores as `retrieval_scores`, in pool order.
    out = tmp_path / "pools.parquet"
    cli("retrieve", "--retriever", "bm25", "--k", "3", "--corpus", str(corpus),
        "--questions", str(questions), "--output", str(out))
    file_rows = pq.read_table(out)
    scores = pq.read_table(tmp_path / "pools.retrieval.parquet")
    result = hopscore.Retrieve(corpus, retriever="bm25", k=3).retrieve(pq.read_table(questions))
    rows = result.rows
    assert rows.drop_columns(["retrieval_scores"]).to_pylist() == file_rows.to_pylist()
    assert rows.column("retrieval_scores").to_pylist() == scores.column("scores").to_pylist()
    titles = [[p["title"] for p in pool] for pool in rows.column("passages").to_pylist()]
    assert titles == scores.column("passage_ids").to_pylist()
    assert all(len(t) == 3 for t in titles)
    assert result.quarantine.num_rows == 0
    assert rows.schema.metadata[b"hopscore.retriever"] == b"bm25"
    with pytest.raises(ValueError, match="`retrieve` needs the option `corpus`"):
        hopscore._native.Job("retrieve", "{}")
