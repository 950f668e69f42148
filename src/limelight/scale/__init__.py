"""Beyond one machine: exact exposure and embeddings on Ray (the ``scale`` extra).

- ``compute_exposure(..., engine=RayEngine(address=None))`` (``limelight.exposure``; or
  ``engine="ray"``, a name this package registers when imported) runs the query shards as Ray
  tasks (``compute_shards``) and writes the same store as the local engine; ``IndexRetriever``
  ships an index directory by path (memory-mapped per node).
- ``RayEncoder``: an ``Encoder`` whose ``encode`` runs as Ray Data batch inference (documents
  and queries); it plugs into ``DenseIndex.build`` and ``DenseRetriever`` unchanged.
- ``build_index_ray`` / ``build_index_ray_from``: the streaming BM25 index build with the
  analysis of runs of documents as Ray tasks, merged on the driver (the same index bytes as
  ``build_index``; resumable run by run).
- ``ShardedReplay``: the replay of a live service (kind ``http``) as Ray exposure tasks, a
  journal per shard.
- ``ray_session``: start a local cluster or join one at an address.
- ``LoopbackCluster``: a real multi-node cluster on this machine (``ray start`` per node), for
  tests and benchmarks, with ``kill_node`` to lose a node mid-job.
"""

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports
from limelight.scale.cluster import ray_session
from limelight.scale.exposure import IndexRetriever, RayEngine, compute_shards  # registers "ray"
from limelight.scale.index import build_index_ray, build_index_ray_from
from limelight.scale.loopback import LoopbackCluster
from limelight.scale.replay import ShardedReplay

if TYPE_CHECKING:  # lazy: RayEncoder imports sentence-transformers, so only when asked for
    from limelight.scale.embed import RayEncoder

__all__, __getattr__, __dir__ = lazy_exports(__name__)
