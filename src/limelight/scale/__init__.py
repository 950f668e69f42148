"""Beyond one machine: exact exposure and embeddings on Ray (the ``scale`` extra).

- ``compute_exposure(..., engine=RayEngine(address=None))`` (``limelight.exposure``; or
  ``engine="ray"``, a name this package registers when imported) runs the query shards as Ray
  tasks (``compute_shards``) and writes the same store as the local engine; ``IndexRetriever``
  ships an index directory by path (memory-mapped per node).
- ``RayEncoder``: an ``Encoder`` whose ``encode`` runs as Ray Data batch inference (documents
  and queries); it plugs into ``DenseIndex.build`` and ``DenseRetriever`` unchanged.
- ``ray_session``: start a local cluster or join one at an address.
"""

from limelight.scale.cluster import ray_session
from limelight.scale.exposure import IndexRetriever, RayEngine, compute_shards

__all__ = ["IndexRetriever", "RayEncoder", "RayEngine", "compute_shards", "ray_session"]


def __getattr__(name: str):
    if name == "RayEncoder":  # imports sentence-transformers: only when asked for
        from limelight.scale.embed import RayEncoder

        return RayEncoder
    raise AttributeError(name)
