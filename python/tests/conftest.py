"""Shared fixtures of the Python tests: the repository's test models and data, the
``hopscore`` console script of the installed wheel, and the CLI runs the API is
compared with."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
TOKENIZER = REPO / "weights" / "deberta-v3-tokenizer" / "tokenizer.json"
#: The console script installed beside this interpreter by the wheel.
HOPSCORE = Path(sys.executable).parent / "hopscore"


def fixture(rel: str) -> str:
    return str(FIXTURES / rel)


def cli(*args: str) -> subprocess.CompletedProcess:
    """Runs the console script on 2 worker threads; fails the test on a non-zero exit."""
    env = dict(os.environ, HOPSCORE_THREADS="2")
    done = subprocess.run([str(HOPSCORE), *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"hopscore {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done


def read_output(path: Path) -> pa.Table:
    """A Parquet file of the CLI, checking that its run metadata (``hopscore.*``) is
    both in the footer and in the schema, as the API's tables carry it."""
    footer = {k: v for k, v in pq.read_metadata(path).metadata.items() if k != b"ARROW:schema"}
    table = pq.read_table(path)
    assert table.schema.metadata == footer, f"{path}: schema metadata {table.schema.metadata}"
    return table


def flags(options: "dict") -> "list[str]":
    """A job's keyword arguments as the CLI's flags: ``{"beam_size": 2, "title": True}``
    → ``["--beam-size", "2", "--title"]`` (``None`` and ``False`` leave the flag out;
    a boolean-valued flag such as ``--normalize`` takes ``on``/``off``)."""
    out = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if key in ("normalize",) and isinstance(value, bool):
            out.extend([flag, "on" if value else "off"])
        elif key == "demo_ids":
            for ids in value:
                out.extend([flag, ",".join(map(str, ids))])
        elif isinstance(value, list):
            out.extend([flag, ",".join(map(str, value))])
        elif value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out.extend([flag, str(value)])
    return out


def cli_run(command: str, args: "list[str]", input_path: Path, out_dir: Path):
    """``hopscore <command> <args> --input … --output …``: (rows, quarantine) tables."""
    out = out_dir / f"{command}.parquet"
    cli(command, *args, "--input", str(input_path), "--output", str(out))
    return read_output(out), read_output(out_dir / f"{command}.quarantine.parquet")


@pytest.fixture(scope="session")
def tokenizer() -> str:
    if not TOKENIZER.is_file():
        pytest.fail(f"{TOKENIZER} is missing: run tools/fetch_tokenizer.sh first")
    return str(TOKENIZER)


@pytest.fixture(scope="session")
def word_tokenizer(tmp_path_factory) -> str:
    """A word-level tokenizer.json for the 1000-entry vocabulary of the small random
    DeBERTa fixtures: ``[PAD] [CLS] [SEP]`` then ``w3`` … ``w999`` (``w3`` for unknown
    words), pairs as ``[CLS] a [SEP] b [SEP]``."""
    vocab = {t: i for i, t in enumerate(["[PAD]", "[CLS]", "[SEP]"])}
    vocab.update({f"w{i}": i for i in range(3, 1000)})

    def special(t, type_id):
        return {"SpecialToken": {"id": t, "type_id": type_id}}

    def seq(s, type_id):
        return {"Sequence": {"id": s, "type_id": type_id}}

    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "decoder": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)],
            "pair": [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]},
            },
        },
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w3"},
    }
    path = tmp_path_factory.mktemp("word_tokenizer") / "tokenizer.json"
    path.write_text(json.dumps(tok))
    return str(path)


@pytest.fixture(scope="session")
def questions(tmp_path_factory, tokenizer) -> Path:
    """The HotpotQA slice imported by the CLI, with one bad row (no passages) as the
    fourth: a question file every question command quarantines one row of."""
    d = tmp_path_factory.mktemp("questions")
    imported = d / "imported.parquet"
    cli("import", "hotpotqa", fixture("data/hotpot_dev_distractor_slice.json.gz"), "-o", str(imported))
    table = pq.read_table(imported)
    bad = table.slice(0, 1).to_pylist()
    bad[0].update(id="bad-no-passages", passages=[])
    bad = pa.Table.from_pylist(bad, schema=table.schema)
    out = d / "questions.parquet"
    pq.write_table(pa.concat_tables([table.slice(0, 3), bad, table.slice(3)]), out)
    return out


def rows_file(factory, name: str, columns: "tuple[str, ...]", rows: list) -> Path:
    """``rows`` (tuples in ``columns`` order) written as a Parquet file of string columns."""
    out = factory.mktemp(name) / f"{name}.parquet"
    pq.write_table(pa.table({c: list(values) for c, values in zip(columns, zip(*rows))}), out)
    return out


@pytest.fixture(scope="session")
def pairs(tmp_path_factory) -> Path:
    """(id, text_a, text_b) rows for ``classify`` in the words of
    :func:`word_tokenizer`; the third has no text_a."""
    return rows_file(tmp_path_factory, "pairs", ("id", "text_a", "text_b"), [
        ("p0", "w10 w11 w12 w13", "w20 w21 w22 w23 w24 w25"),
        ("p1", "w30 w31 w32", "w40 w41 w42 w43 w44 w45 w46 w47"),
        ("bad-null", None, "w50 w51"),
        ("p3", "w60 w61 w62 w63 w64", "w70 w71 w72 unknown w73"),
    ])


@pytest.fixture(scope="session")
def passages(tmp_path_factory) -> Path:
    """(id, title, text) rows for ``embed`` in the words of :func:`word_tokenizer`; the
    third has no text."""
    return rows_file(tmp_path_factory, "passages", ("id", "title", "text"), [
        ("e0", "w10", "w11 w12 w13 w14"),
        ("e1", None, "w30 w31 w32"),
        ("bad-null", "w50", None),
        ("e3", "w60 w61", "w70 w71 w72 unknown w73"),
    ])


@pytest.fixture(scope="session")
def loglik_rows(tmp_path_factory) -> Path:
    """(id, prompt, target) rows for ``loglik``; the third has a null target."""
    return rows_file(tmp_path_factory, "loglik", ("id", "prompt", "target"), [
        ("l0", "Document: Paris is the capital of France.", " What is the capital of France?"),
        ("l1", "Document: The Nile flows north. ", "Which way does the Nile flow?"),
        ("bad-null", "Document: x.", None),
        ("l3", "Document: Bees make honey.", " What do bees make?"),
    ])


#: The commit of the hub-cache fixture (:func:`hub_home`).
HUB_COMMIT = "3" * 40


@pytest.fixture(scope="session")
def hub_home(tmp_path_factory, word_tokenizer) -> Path:
    """An ``HF_HOME`` whose hub cache holds ``org/tiny-bert`` (the random BERT of the
    fixtures with the word tokenizer) as ``huggingface_hub`` lays a download out:
    ``blobs/<sha256>``, ``snapshots/<commit>/<file>`` linking to them, ``refs/main``."""
    import hashlib

    home = tmp_path_factory.mktemp("hf_home")
    repo = home / "hub" / "models--org--tiny-bert"
    snapshot = repo / "snapshots" / HUB_COMMIT
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    sources = {
        "config.json": FIXTURES / "bert" / "random_plain" / "config.json",
        "model.safetensors": FIXTURES / "bert" / "random_plain" / "model.safetensors",
        "tokenizer.json": Path(word_tokenizer),
    }
    for name, src in sources.items():
        data = src.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(HUB_COMMIT)
    return home


@pytest.fixture(scope="session")
def corpus(questions, tmp_path_factory):
    """The passages of the question file as a corpus (id = title)."""
    texts = {}
    for pool in pq.read_table(questions).column("passages").to_pylist():
        for p in pool:
            texts.setdefault(p["title"], p["text"])
    path = tmp_path_factory.mktemp("corpus") / "corpus.parquet"
    pq.write_table(pa.table({"id": list(texts), "title": list(texts), "text": list(texts.values())}), path)
    return path
