"""Beam Retrieval over a question file with Ray Data: one actor per GPU of the cluster
(or CPU actors with --cpu-actors), output written as Parquet part files.

    python examples/cluster/ray_beam.py questions.parquet out/ --model weights/beam-hotpot
"""

import argparse

import ray

import hopscore.ray


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("questions")
    p.add_argument("output", help="folder for the Parquet part files")
    p.add_argument("--model", required=True)
    p.add_argument("--cpu-actors", type=int, help="CPU actors instead of one per GPU")
    p.add_argument("--threads", type=int, default=4, help="threads per CPU actor")
    a = p.parse_args()

    ray.init()
    if a.cpu_actors:
        opts = hopscore.ray.actor_options(a.cpu_actors, device="cpu", threads=a.threads)
        job = dict(model=a.model, device="cpu", threads=a.threads)
    else:
        opts = hopscore.ray.actor_options(int(ray.cluster_resources().get("GPU", 0)), device="cuda")
        job = dict(model=a.model, device="cuda")
    ds = ray.data.read_parquet(a.questions)
    out = ds.map_batches(hopscore.ray.Beam, fn_constructor_kwargs=dict(job, quarantine_dir=f"{a.output}/quarantine"),
                         **opts)
    out.write_parquet(a.output)


if __name__ == "__main__":
    main()
