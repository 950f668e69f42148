"""Exposing query identification (EQI; Li, Li, Mitra, Diaz, Biega, WWW 2022).

For a document, find the queries of a query log that expose it (put it in their top n). The
exposure store (``limelight.exposure.store``) is the ground truth.

Usage::

    from limelight.exposure import ExposureStore
    from limelight.exposure.eqi import (ExactReverse, BM25Reverse, DenseReverse, BruteForce,
                                        train_eqi, EQIModel, evaluate_eqi, tune_bm25_reverse)
    from limelight.exposure.relq import relq, relq_many, RELQ, TABLE2

    store = ExposureStore.open("stores/npl-bm25")
    ex = ExactReverse.build(store, bm25_retriever)         # BM25 or DenseRetriever of the store
    ex.query(docid="1234", k=100)      # [{"qid", "query", "score", "rank"}] read from the store
    ex.query(text="a new abstract …")  # computed: no query re-run, exact (frozen BM25 stats)
    ex.add_documents(texts, docids)    # 1,000 new documents at once → NewExposure (CSR lists)
    recompute_new_exposure(retriever, store.queries, 100, texts, docids)  # brute force: equal

    rev = BM25Reverse(store.queries, analyzer)             # query log indexed with BM25
    codes, scores = rev.search(texts=["..."], k=100)
    dense = DenseReverse(store.queries, query_emb, encoder)
    model = train_eqi("residual", store, query_emb, doc_emb, n_queries=50_000, n_docs=20_000,
                      exclude_docs=test_docs, steps=2000, encoder=encoder)
    model.save("models/npl-residual"); model = EQIModel.load("models/npl-residual")
    model.check_store(store); model.index_queries(store.queries, query_emb, encoder)
    evaluate_eqi(store, {"dense-reverse": dense, "residual": model}, docs, embeddings=doc_emb[docs])
    # → {"dense-reverse": {"RELQ(0.5,0.5)": .., "RELQ(0.5,0.9)": .., "RELQ(1,1)": ..,
    #                      "RELQ(EXH,NDCG)": .., "n_docs": ..}, ...}

Every method's ``search(texts=..., embeddings=..., k=...)`` returns ``(codes, scores)``: ``(m, k)``
query codes of the store's query set (``-1`` padding) and float32 scores, best first.
``limelight eqi train|query|evaluate`` wrap these calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from limelight._lazy import lazy_exports

if TYPE_CHECKING:  # the exports, written once: lazy_exports resolves them on first use
    from limelight.exposure.eqi.base import encode_queries_cached, rows, store_fingerprint
    from limelight.exposure.eqi.evaluate import (
        evaluate_eqi,
        evaluate_lists,
        method_lists,
        one_tailed_t,
        summarize,
    )
    from limelight.exposure.eqi.exact import ExactReverse, NewExposure, recompute_new_exposure
    from limelight.exposure.eqi.learned import (
        METHODS,
        EQIModel,
        TrainingData,
        sample_triples,
        train_eqi,
        training_data,
        validation_docs,
    )
    from limelight.exposure.eqi.reverse import (
        BM25Reverse,
        BruteForce,
        DenseReverse,
        tune_bm25_reverse,
    )

__all__, __getattr__, __dir__ = lazy_exports(__name__)
