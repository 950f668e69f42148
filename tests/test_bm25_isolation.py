"""Issue 44 item 6: a SIGSEGV in bm25s's numba ``retrieve`` after limelight had searched a
memory-mapped index in the same process.

The cause is bm25s 0.3.16's, not limelight's and not numba's cache: ``BM25.index`` adds the
empty token ``""`` to its vocabulary at id ``V``, one past its ``V`` score columns, and
``retrieve`` sends every query without a known token to that id; the numba ``retrieve`` reads
``indptr[V + 1]``, the word after the array's end, and adds up the postings from ``indptr[V]`` to
whatever that word holds. On the heap that word is the size field of the next malloc chunk, so the
query either scores nothing or walks millions of words past ``indices``/``data`` and faults —
depending on what the process allocated before (opening an index with ``BM25Index.load`` instead
of building it in memory is enough to change it; no limelight kernel needs to run).

- the mechanism, made deterministic by giving bm25s's arrays a next word we choose, and the fix
  of ``benchmarks/bm25_batch.py`` (``pad_empty_token``: an empty column for ``""``), which makes
  such queries score 0 with numba's bounds checking on (where unpatched bm25s raises);
- limelight's numba kernels, run on an index built by ``limelight index`` and opened with
  ``BM25Index.load`` (memory-mapped), under numba's bounds checking in a fresh process with a
  fresh numba cache (the cache's key ignores ``NUMBA_BOUNDSCHECK``: a warm cache silently runs
  unchecked code), read and write nothing outside their arrays; the check is shown to be live
  by a query term id past the vocabulary, which must raise ``IndexError``.
- the bm25s anchor of ``benchmarks/bm25_batch.py`` still runs in a process of its own: its
  results equal limelight's on the same memory-mapped index searched in this process, and a
  crash of the anchor (a real SIGSEGV sent to it) ends the anchor only, with a one-line error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from limelight.data import load_dataset, load_query_log
from limelight.retrieval.bm25 import BM25, BM25Index
from limelight.retrieval.index_dir import build_index

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

BOUNDS_SCRIPT = textwrap.dedent("""
    import sys
    import numba
    import numpy as np
    assert numba.config.BOUNDSCHECK, "bounds checking is off"
    from limelight.data import load_dataset, load_query_log
    from limelight.retrieval import bm25_kernels as K
    from limelight.retrieval.bm25 import BM25, BM25Index
    from limelight.retrieval.index_dir import build_index

    path = build_index(load_dataset("cranfield").collection, sys.argv[1])  # streaming build
    index = BM25Index.load(path / "bm25")
    assert isinstance(index.docs, np.memmap)
    texts = load_query_log().texts[:3000].tolist()  # over 1,000: the compiled query encoder
    ref = None
    for threads in (1, 2):
        r = BM25(index, threads=threads)
        got = r.search_batch(texts, 100)
        if ref is not None:
            assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
        ref = got
        r.search_batch(texts[:50], 1000)                        # the Python query analysis
        r.search_vectors(r.query_vectors(texts[:500]), 7)
        r.score(texts[:500], ref[0][:500, :10])
        index.kth_weights(r.k1, r.b, 3, threads=threads)        # every term
    # the check is live: a term id past the vocabulary must be caught, not read
    qptr = np.array([0, 1], dtype=np.int64)
    bad = np.array([index.n_terms + 5], dtype=np.int32)
    w = index.weights(index.k1, index.b)
    try:
        K.search_csr(qptr, bad, np.ones(1, np.float32), index.indptr, index.docs, w,
                     np.zeros(0, np.float32), index.n_docs, 10, 1)
    except Exception as e:  # in a parallel region numba wraps it in a SystemError
        chain = []
        while e is not None:
            chain.append(f"{type(e).__name__}: {e}")
            e = e.__cause__ or e.__context__
        if "IndexError: index is out of bounds" in chain:
            print("BOUNDS-OK")
""")


def _toy_bm25s():
    import bm25s

    bm = bm25s.BM25(k1=0.9, b=0.4, method="lucene", backend="numba")
    bm.index([["apple", "pie"], ["apple", "tart"], ["cherry", "pie"]], show_progress=False)
    return bm


def test_bm25s_empty_query_reads_past_indptr_and_the_pad_stops_it():
    from bm25_batch import pad_empty_token

    bm = _toy_bm25s()
    ip, ind, data = bm.scores["indptr"], bm.scores["indices"], bm.scores["data"]
    V, P = len(ip) - 1, int(ip[-1])
    assert bm.vocab_dict[""] == V  # the empty-query token: one past the last column
    # bm25s's arrays as views of longer buffers whose next words we choose: after indptr, P + 1
    # (one posting past the end), and there a posting of document 0 weighing 7
    big_ip = np.append(ip, P + 1).astype(ip.dtype)
    big_ind = np.append(ind, 0).astype(ind.dtype)
    big_data = np.append(data, 7).astype(data.dtype)
    bm.scores.update(indptr=big_ip[:V + 1], indices=big_ind[:P], data=big_data[:P])
    queries = [bm.get_tokens_ids(["pie"]), bm.get_tokens_ids(["durian"])]  # 2nd: no known token
    r = bm.retrieve(queries, k=3, n_threads=1, show_progress=False)
    assert r.scores[1].max() == 7  # read indptr[V + 1], then the posting after the last one
    pad_empty_token(bm)
    assert len(bm.scores["indptr"]) == V + 2
    fixed = bm.retrieve(queries, k=3, n_threads=1, show_progress=False)
    assert (fixed.scores[1] == 0).all()
    np.testing.assert_array_equal(fixed.scores[0], r.scores[0])


BM25S_BOUNDS_SCRIPT = textwrap.dedent("""
    import sys
    import numba
    assert numba.config.BOUNDSCHECK, "bounds checking is off"
    import bm25s  # its numba kernels are not cached: compiled here, bounds-checked
    sys.path.insert(0, sys.argv[1])
    from bm25_batch import pad_empty_token

    for fixed in (False, True):
        bm = bm25s.BM25(k1=0.9, b=0.4, method="lucene", backend="numba")
        bm.index([["apple", "pie"], ["apple", "tart"], ["cherry", "pie"]], show_progress=False)
        if fixed:
            pad_empty_token(bm)
        queries = [bm.get_tokens_ids(["pie"]), bm.get_tokens_ids(["durian"]), []]
        try:
            r = bm.retrieve(queries, k=3, n_threads=1, show_progress=False)
            print(fixed, "zero" if (r.scores[1:] == 0).all() else "NONZERO")
        except IndexError:
            print(fixed, "IndexError")
""")


def test_bm25s_empty_query_out_of_bounds_under_numba_bounds_checking(tmp_path):
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    res = subprocess.run([sys.executable, "-c", BM25S_BOUNDS_SCRIPT, str(REPO / "benchmarks")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["False", "IndexError", "True", "zero"], res.stdout


def test_limelight_kernels_within_bounds_on_mmap_index(tmp_path):
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    res = subprocess.run([sys.executable, "-c", BOUNDS_SCRIPT, str(tmp_path / "idx")], env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "BOUNDS-OK", res.stdout


def test_bm25s_anchor_in_own_process_matches_mmap_search_and_contains_a_crash(tmp_path):
    from bm25_batch import BM25sAnchor

    coll = load_dataset("cranfield").collection
    index = BM25Index.load(build_index(coll, tmp_path / "idx") / "bm25")
    assert isinstance(index.docs, np.memmap)
    texts = load_query_log().texts[:2000].tolist()
    docs, scores = BM25(index, threads=2).search_batch(texts, 10)  # here, numba threads on
    an = index.analyzer
    anchor = BM25sAnchor()
    try:
        assert anchor.proc.pid != os.getpid()
        anchor.index(an.tokenize_many(coll.texts.tolist()), an.tokenize_many(texts))
        for threads in (1, 2):
            _, _, (d_bm, s_bm) = anchor.retrieve(None, 10, threads=threads, want=True)
            has = docs >= 0
            np.testing.assert_allclose(s_bm[has], scores[has], rtol=0, atol=1e-5)
            assert (s_bm[~has] == 0).all()
        # a segmentation fault in the anchor's process ends that process only
        os.kill(anchor.proc.pid, signal.SIGSEGV)
        anchor.proc.join(timeout=30)
        with pytest.raises(RuntimeError, match=r"anchor process died \(exit code -11"):
            anchor.retrieve(None, 10)
    finally:
        anchor.close()
        if anchor.proc.is_alive():
            anchor.proc.kill()
    again = BM25(index, threads=2).search_batch(texts, 10)  # this process carries on
    assert np.array_equal(again[0], docs) and np.array_equal(again[1], scores)


TOY = """from numba import njit


@njit(cache=True)
def total(a, i):
    return a[:i].sum() + a[i]
"""
TOY_RUN = """import sys, numpy as np, toy
a = np.arange(4, dtype=sys.argv[1])
try:
    print(repr(toy.total(a, int(sys.argv[2]))))
except IndexError:
    print("IndexError")
"""


def test_numba_cache_facts_behind_the_isolation(tmp_path):
    """Two behaviours of numba's on-disk cache (docs/results-bm25.md; not the cause of item 6,
    which is bm25s's, but why the bounds test above uses a fresh cache and a hazard of shared
    caches): a warm cache runs unchecked code under NUMBA_BOUNDSCHECK=1, and two processes that
    add signatures at once can leave one signature's index entry on the other's machine code,
    which numba then runs on arrays of another dtype of the same item size, silently."""
    (tmp_path / "toy.py").write_text(TOY)
    (tmp_path / "run.py").write_text(TOY_RUN)
    cache = tmp_path / "__pycache__"

    def run(dtype: str, i: int, **env) -> str:
        res = subprocess.run([sys.executable, "run.py", dtype, str(i)], cwd=tmp_path,
                             env={**os.environ, **env}, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        return res.stdout.strip()

    assert run("int64", 3) == "6"                                 # compiled and cached
    assert run("int64", 9, NUMBA_BOUNDSCHECK="1") != "IndexError"  # the cached, unchecked code
    fresh = str(tmp_path / "fresh")
    assert run("int64", 9, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=fresh) == "IndexError"
    # two writers: A (int64) and B (float64) both read an empty index and both take data file 1;
    # B's data file lands last, A's index lands last
    (index,) = cache.glob("toy.total-*.nbi")
    a_index = index.read_bytes()
    index.unlink()
    assert run("float64", 3) == "6.0"           # B: index {float64: 1}, data file 1 = float64
    index.write_bytes(a_index)                  # A's index: {int64: 1}
    got = run("int64", 3)
    assert got != "6", "numba now checks what its cache returns: the isolation may be revisited"
