"""Topics in the core install (no scikit-learn, no threadpoolctl: the wheel check's audit of a
small collection failed on both): raw TF-IDF rows are clustered by the numpy K-means."""

from __future__ import annotations

import sys

import numpy as np

from limelight.exposure.topics import topics_from_texts

# two distinct searches, each issued 15 times: two points, so any K-means finds the two topics
TEXTS = ["apple pie recipe", "linux kernel panic"] * 15


def test_topics_from_texts_without_scikit_learn(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn -> ImportError
    monkeypatch.setitem(sys.modules, "sklearn.cluster", None)
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    t = topics_from_texts(TEXTS, 2, seed=0, dims=None)
    labels = np.asarray(t.labels)
    assert t.k == 2 and len(labels) == len(TEXTS)
    baking = labels[[i for i, q in enumerate(TEXTS) if "recipe" in q]]
    kernel = labels[[i for i, q in enumerate(TEXTS) if "kernel" in q]]
    assert len(set(baking)) == 1 and len(set(kernel)) == 1 and baking[0] != kernel[0]
