"""A Ray Data pipeline on a local Ray (2 CPUs) with two CPU actors of
``hopscore.ray.Beam`` (or ``hopscore.ray.Embed``) gives the rows of the CLI's output
file; the bad row of the input is written to the quarantine folder."""

import glob

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hopscore
import hopscore.ray
from conftest import cli_run, fixture, flags

ray = pytest.importorskip("ray", reason="ray is installed by .ci/run; pip install 'hopscore[ray]'")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def by_id(rows):
    return sorted(rows, key=lambda r: r["id"])


def assert_actors_give_the_clis_rows(actor, command, job, input_path, tmp_path, block_rows, bad_id,
                                     runtime_env=None):
    """Two CPU actors of ``actor`` over ``input_path`` in blocks of ``block_rows`` give
    the rows of ``hopscore command`` and write its one bad row (``bad_id``) to the
    quarantine folder (``runtime_env``: the actors' Ray runtime environment)."""
    cli_rows, cli_bad = cli_run(command, flags(job), input_path, tmp_path)

    quarantine = tmp_path / "quarantine"
    # Blocks in memory: the 2 CPUs go to the 2 actors, none is left for read tasks.
    table = pq.read_table(input_path)
    ds = ray.data.from_arrow([table.slice(i, block_rows) for i in range(0, table.num_rows, block_rows)])
    out = ds.map_batches(
        actor,
        batch_size=block_rows + 2,
        fn_constructor_kwargs=dict(job, threads=1, quarantine_dir=str(quarantine)),
        **hopscore.ray.actor_options(actors=2, device="cpu", threads=1),
        **({"runtime_env": runtime_env} if runtime_env else {}),
    )
    rows = pa.concat_tables(ray.get(out.to_arrow_refs()))

    assert rows.schema.equals(cli_rows.schema, check_metadata=False)
    assert by_id(rows.to_pylist()) == by_id(cli_rows.to_pylist())
    bad = pa.concat_tables([pq.read_table(f) for f in glob.glob(f"{quarantine}/*.parquet")])
    assert bad.column("id").to_pylist() == cli_bad.column("id").to_pylist() == [bad_id]
    assert bad.column("reason").to_pylist() == cli_bad.column("reason").to_pylist()


def test_two_cpu_actors_give_the_clis_rows(local_ray, questions, tmp_path, tokenizer):
    job = {"model": fixture("beam/model"), "tokenizer": tokenizer, "beam_size": 2}
    assert_actors_give_the_clis_rows(hopscore.ray.Beam, "beam", job, questions, tmp_path, 6, "bad-no-passages")


def test_embed_actors_give_the_clis_rows(local_ray, passages, tmp_path, word_tokenizer):
    job = {"model": fixture("bert/random_plain"), "tokenizer": word_tokenizer}
    assert_actors_give_the_clis_rows(hopscore.ray.Embed, "embed", job, passages, tmp_path, 2, "bad-null")


def test_embed_actors_take_a_hub_id_from_the_cache(local_ray, passages, tmp_path, hub_home, monkeypatch):
    env = {"HF_HOME": str(hub_home), "HF_HUB_CACHE": str(hub_home / "hub"), "HF_HUB_OFFLINE": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the CLI run compared with
    job = {"model": "org/tiny-bert"}
    assert_actors_give_the_clis_rows(hopscore.ray.Embed, "embed", job, passages, tmp_path, 2, "bad-null",
                                     runtime_env={"env_vars": env})


def test_actor_options_give_one_gpu_per_actor_or_cpu_actors():
    def pool(opts):
        compute = opts.pop("compute")
        assert isinstance(compute, ray.data.ActorPoolStrategy)
        assert compute.min_size == compute.max_size
        return compute.min_size, opts

    gpu = hopscore.ray.actor_options(4, device="cuda")
    assert pool(gpu) == (4, {"batch_format": "pyarrow", "num_gpus": 1})
    cpu = hopscore.ray.actor_options(2, threads=3)
    assert pool(cpu) == (2, {"batch_format": "pyarrow", "num_cpus": 3})
    assert "concurrency" not in cpu, "deprecated by Ray for actor pools"
    with pytest.raises(ValueError, match="device"):
        hopscore.ray.actor_options(1, device="tpu")


def test_retrieve_actors_give_the_jobs_pools(local_ray, questions, corpus):
    # Two actors over blocks of 3 questions: the pools `hopscore.Retrieve` gives the
    # whole table (which test_jobs holds to the CLI's files).
    table = pq.read_table(questions)
    job = {"corpus": str(corpus), "retriever": "bm25", "k": 3}
    want = hopscore.Retrieve(**job).process(table).rows
    ds = ray.data.from_arrow([table.slice(i, 3) for i in range(0, table.num_rows, 3)])
    out = ds.map_batches(
        hopscore.ray.Retrieve,
        batch_size=3,
        fn_constructor_kwargs=dict(job, threads=1),
        **hopscore.ray.actor_options(actors=2, device="cpu", threads=1),
    )
    rows = pa.concat_tables(ray.get(out.to_arrow_refs()))
    assert rows.schema.equals(want.schema, check_metadata=False)
    assert by_id(rows.to_pylist()) == by_id(want.to_pylist())
