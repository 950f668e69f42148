"""Retrieval: BM25 (``bm25``), dense (``dense``), fusion and composable pipelines (``base``)."""
