"""Models by their Hugging Face Hub id from Python: a model in the hub cache (laid out
as ``huggingface_hub`` downloads it) is found by ``"org/name"`` with
``HF_HUB_OFFLINE=1``, gives the rows of its local directory, and its run records the
repository and commit; one not in the cache raises naming the cache searched."""

import pytest

import hopscore
from conftest import HUB_COMMIT, fixture


@pytest.fixture
def offline_hub(hub_home, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(hub_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return hub_home


def test_a_hub_id_in_the_cache_gives_the_local_directorys_rows(offline_hub, passages, word_tokenizer):
    by_id = hopscore.Embedder("org/tiny-bert").embed(passages_table(passages))
    by_path = hopscore.Embedder(fixture("bert/random_plain"), tokenizer=word_tokenizer).embed(
        passages_table(passages))
    assert by_id.rows.column("embedding").to_pylist() == by_path.rows.column("embedding").to_pylist()
    meta = by_id.rows.schema.metadata
    assert meta[b"hopscore.model_repo"] == b"org/tiny-bert"
    assert meta[b"hopscore.model_commit"] == HUB_COMMIT.encode()
    assert b"hopscore.model_repo" not in by_path.rows.schema.metadata
    pinned = hopscore.Embedder(f"org/tiny-bert@{HUB_COMMIT}").embed(passages_table(passages))
    assert pinned.rows.column("embedding").to_pylist() == by_path.rows.column("embedding").to_pylist()


def test_a_hub_id_missing_from_the_cache_raises_naming_it(offline_hub):
    with pytest.raises(RuntimeError, match=r"HF_HUB_OFFLINE is set and org/absent@main is not in the hub cache"):
        hopscore.Embedder("org/absent")


def passages_table(path):
    import pyarrow.parquet as pq

    return pq.read_table(path)
