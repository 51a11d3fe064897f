"""moeroof.run: work spread over processes or machines with dask.distributed (the ``sweep``
extra): :mod:`~moeroof.run.sweep` (a grid of plan points, results in Parquet),
:mod:`~moeroof.run.shard` (cache simulations and SHARDS curves by layer or hash slice) and
:mod:`~moeroof.run.cluster` (the local cluster they start). Each runs serially without dask,
with the same answer.
"""
