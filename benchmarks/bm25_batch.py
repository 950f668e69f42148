"""BM25 batch retrieval speed: limelight vs bm25s (numba) vs rank_bm25, on the same tokens.

The Debian catalog (63,666 packages; name, summary, section, tags and description joined) is
searched with every distinct query of the shared query log, top 100. bm25s and rank_bm25 are
given the token lists of limelight's analyzer, so all three score the same tokens.

Reported: index build times; queries/second of
  * limelight, 1 thread, end to end (``search_batch`` on the raw texts: analysis included),
  * limelight, 1 thread, kernel only (``search_vectors`` on pre-analyzed query vectors),
  * bm25s 0.3.16, numba backend, 1 thread (``retrieve`` on pre-computed token ids),
  * rank_bm25 BM25Okapi (``get_scores`` + top-100) on a sample of queries,
  * limelight with 2 threads (both figures);
  * the query analysis alone: the compiled encoder (``QueryLexicon.encode``, numba, off the
    GIL) on 1 and 2 threads, and the Python reference it replaces (``_encode_reference``);
each a median over ``--repeats`` interleaved repeats (the machine is shared: the load average
is printed). A sanity check compares limelight's and bm25s's top-100 scores, and the compiled
analysis's term ids with the reference's.

Acceptance (issue 20): end to end, 2 threads ≥ 1.7× 1 thread, and 1 thread still ≥ 2.5×
bm25s numba on 1 thread; both printed as ratios at the end, with met / not met.

The machine is shared (2 cores): before each 1-thread/2-thread pair the benchmark waits, up to
``--quiet-wait`` seconds, until other processes use under 0.1 core (from ``/proc/stat``), and it
prints how many cores other processes used during each timed run ("others").

bm25s runs in a process of its own (``BM25sAnchor``, spawned; its index built and held there,
each timed ``retrieve`` measured there), so that a crash of the anchor ends only the anchor. The
segmentation fault this benchmark once died in (issue 44 item 6, ``docs/results-bm25.md``) was
bm25s's: a query without a known token is sent to the vocabulary's empty token, which has no
score column, and the numba ``retrieve`` reads one word past the end of its ``indptr``;
``pad_empty_token`` gives that token an empty column (same work, in bounds, zero scores).

    .venv/bin/python benchmarks/bm25_batch.py [--repeats 3] [--rank-bm25-sample 500]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
from _summary import record

CPU: dict[str, list[float]] = {}
OTHERS: dict[str, list[float]] = {}  # cores used by other processes during each timed run


def _busy_seconds() -> float | None:
    """CPU-seconds the whole machine has spent busy since boot (``/proc/stat``), or ``None``."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def _wait_quiet(max_wait: float, below: float = 0.1, window: float = 1.0) -> float:
    """Wait until other processes use under ``below`` cores over ``window`` seconds (at most
    ``max_wait`` seconds); returns the cores they used in the last window."""
    end = time.monotonic() + max_wait
    while True:
        b0, c0 = _busy_seconds(), time.process_time()
        time.sleep(window)
        b1, c1 = _busy_seconds(), time.process_time()
        if b0 is None:
            return float("nan")
        used = max(0.0, (b1 - b0) - (c1 - c0)) / window
        if used < below or time.monotonic() >= end:
            return used


def _timed(fn, name: str | None = None):
    """Wall-clock seconds and result of ``fn()``; process CPU seconds are kept under ``name``,
    and the cores other processes used meanwhile."""
    b = _busy_seconds()
    c = time.process_time()
    t = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t
    if name:
        cpu = time.process_time() - c
        CPU.setdefault(name, []).append(cpu)
        if b is not None:
            OTHERS.setdefault(name, []).append(max(0.0, _busy_seconds() - b - cpu) / wall)
    return wall, out


def pad_empty_token(bm) -> None:
    """Give the empty token of a bm25s (0.3.16) index the empty score column it lacks, in place.

    ``index`` adds ``""`` to the vocabulary at id ``V``, one past its ``V`` columns, and
    ``retrieve`` sends every query without a known token to it; the numba ``retrieve`` then reads
    ``indptr[V + 1]``, the word after the array's end (numba checks no bounds), and adds up the
    postings from ``indptr[V]`` to whatever that word holds: on the heap, the size of the next
    malloc chunk, so a SIGSEGV or nothing depending on the process's allocation history (issue 44
    item 6). With the column, such a query scores 0 everywhere, as bm25s means it to."""
    ip = bm.scores["indptr"]
    if bm.vocab_dict.get("") == len(ip) - 1:
        bm.scores["indptr"] = np.append(ip, ip[-1])


def _anchor_main(conn) -> None:
    """The anchor's process: build a bm25s (numba) index from token lists, then answer
    ``retrieve`` requests, each timed here (wall and process CPU seconds)."""
    import bm25s

    bm = q_ids = None
    while True:
        msg = conn.recv()
        if msg[0] == "index":
            _, doc_tokens, q_tokens, k1, b = msg
            bm = bm25s.BM25(k1=k1, b=b, method="lucene", backend="numba")
            t = time.perf_counter()
            bm.index(doc_tokens, show_progress=False)
            build = time.perf_counter() - t
            pad_empty_token(bm)
            q_ids = [bm.get_tokens_ids(q) for q in q_tokens]
            conn.send((build, bm25s.__version__))
        elif msg[0] == "retrieve":
            _, n, k, threads, want = msg
            c, t = time.process_time(), time.perf_counter()
            res = bm.retrieve(q_ids if n is None else q_ids[:n], k=k, n_threads=threads,
                              show_progress=False)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            conn.send((wall, cpu, (res.documents, res.scores) if want else None))
        else:
            conn.close()
            return


class BM25sAnchor:
    """bm25s (numba backend) in a spawned process of its own: ``index`` builds it from token
    lists there, ``retrieve`` runs and times a batch there and returns ``(wall s, CPU s,
    (documents, scores) or None)``. A crash of bm25s or numba there is reported as a
    ``RuntimeError`` naming the signal instead of taking this process down."""

    def __init__(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # a fresh interpreter: nothing of this process's numba
        self._conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_anchor_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def _ask(self, msg: tuple):
        try:
            self._conn.send(msg)
            return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self.proc.join()
            raise RuntimeError(f"the bm25s anchor process died (exit code {self.proc.exitcode}; "
                               f"-11 is SIGSEGV)") from None

    def index(self, doc_tokens, q_tokens, k1: float = 0.9, b: float = 0.4) -> tuple[float, str]:
        """Build the index; returns (seconds, bm25s version)."""
        return self._ask(("index", doc_tokens, q_tokens, k1, b))

    def retrieve(self, n: int | None, k: int, threads: int = 1, want: bool = False):
        """Retrieve the first ``n`` queries (all with ``None``)."""
        return self._ask(("retrieve", n, k, threads, want))

    def close(self) -> None:
        if self.proc.is_alive():
            self._conn.send(("stop",))
            self.proc.join(timeout=30)
        self._conn.close()


def _timed_anchor(anchor: BM25sAnchor, name: str, **kw):
    """``_timed`` for the anchor: its own wall and CPU seconds (measured in its process), and the
    cores the other processes used meanwhile (this one's idle waiting included)."""
    b = _busy_seconds()
    wall, cpu, out = anchor.retrieve(**kw)
    CPU.setdefault(name, []).append(cpu)
    if b is not None:
        OTHERS.setdefault(name, []).append(max(0.0, _busy_seconds() - b - cpu) / wall)
    return wall, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--rank-bm25-sample", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2, help="thread count of the parallel run")
    ap.add_argument("--quiet-wait", type=float, default=120.0,
                    help="seconds to wait at most for a quiet machine before each timed pair")
    args = ap.parse_args()

    import numba
    import rank_bm25

    from limelight.analysis import word_char_table
    from limelight.data import load_catalog, load_query_log
    from limelight.retrieval.bm25 import BM25, BM25Index, QueryLexicon

    k = args.k
    print(f"# BM25 batch benchmark ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    print(f"machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; "
          f"numba {numba.__version__}, rank_bm25 0.2.2")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    coll = load_catalog("debian")
    queries = load_query_log()
    texts = queries.texts.tolist()
    nq = len(texts)

    t_build, index = _timed(lambda: BM25Index.build(coll))
    print(f"collection: {coll.name}, {len(coll)} documents, {index.n_terms} terms, "
          f"{len(index.docs)} postings; queries: {nq} distinct queries of the log; top {k}")

    # the same tokens for the other engines
    an = index.analyzer
    doc_tokens = an.tokenize_many(coll.texts.tolist())
    q_tokens = an.tokenize_many(texts)

    anchor = BM25sAnchor()  # bm25s in its own process (see the module docstring)
    t_bm_build, bm_version = anchor.index(doc_tokens, q_tokens)
    print(f"index build: limelight {t_build:.2f} s (analysis included), "
          f"bm25s {bm_version} {t_bm_build:.2f} s (from the same token lists, in its own process)")

    one = BM25(index, threads=1)
    many = BM25(index, threads=args.threads)
    vectors = one.query_vectors(texts)
    n_known = int((np.diff(vectors.indptr) > 0).sum())
    print(f"queries with at least one known term: {n_known}")

    # one-time costs of the compiled query analysis: the \w table (per process) and the index's
    # lexicon (per index; vocabulary → hash table); then warm up (JIT compilation / cache load)
    lex = index.lexicon()  # loads the compiled kernels
    word_char_table.cache_clear()
    t_table, _ = _timed(word_char_table)
    t_lex, lex = _timed(lambda: QueryLexicon(index.analyzer, index.vocabulary))
    index._lexicon = lex
    print(f"compiled query analysis, one-time costs: \\w table {t_table * 1e3:.0f} ms (per "
          f"process), lexicon of the index {t_lex * 1e3:.0f} ms ({len(lex)} words; per index)")
    warm = texts[:2000]
    one.search_batch(warm, k)
    many.search_batch(warm, k)
    anchor.retrieve(200, k)
    ref = one._encode_reference(texts)
    got = lex.encode(texts, args.threads)
    same_ids = np.array_equal(ref[0], got[0]) and np.array_equal(ref[1], got[1])
    assert same_ids, "compiled query analysis differs from the reference"

    p = args.threads
    times: dict[str, list[float]] = {n: [] for n in ("ll1", "ll1k", "bm", f"ll{p}", f"ll{p}k",
                                                     "an1", f"an{p}", "anref")}
    results: dict[str, object] = {}
    jobs = {
        "ll1": lambda: one.search_batch(texts, k),
        f"ll{p}": lambda: many.search_batch(texts, k),
        "ll1k": lambda: one.search_vectors(vectors, k),
        f"ll{p}k": lambda: many.search_vectors(vectors, k),
        "an1": lambda: lex.encode(texts, 1),
        f"an{p}": lambda: lex.encode(texts, p),
        "anref": lambda: one._encode_reference(texts),
    }
    # the 1- and p-thread runs of a figure are adjacent, in alternating order (ABBA), so that a
    # change in the machine's load biases neither
    pairs = [("ll1", f"ll{p}"), ("ll1k", f"ll{p}k"), ("an1", f"an{p}"), ("bm", "anref")]
    loads = []
    for r in range(args.repeats):
        for pair in pairs:
            _wait_quiet(args.quiet_wait)
            for name in (pair if r % 2 == 0 else pair[::-1]):
                if name == "bm":  # the anchor, in its process; its results kept once
                    t, got = _timed_anchor(anchor, name, n=None, k=k, want=r == 0)
                    results.setdefault(name, got)
                else:
                    t, results[name] = _timed(jobs[name], name)
                times[name].append(t)
        loads.append(os.getloadavg()[0])
        res_llm, res_ll = results[f"ll{p}"], results["ll1"]
        assert np.array_equal(res_llm[0], res_ll[0]) and np.array_equal(res_llm[1], res_ll[1])
    res_bm = results["bm"]
    anchor.close()

    qps = {n: nq / statistics.median(v) for n, v in times.items()}

    # rank_bm25 on a sample (it scores every document in Python/numpy per query)
    rng = np.random.default_rng(0)
    sample = np.sort(rng.choice(nq, size=min(args.rank_bm25_sample, nq), replace=False))
    okapi = rank_bm25.BM25Okapi(doc_tokens, k1=0.9, b=0.4)

    def run_okapi():
        for i in sample.tolist():
            s = okapi.get_scores(q_tokens[i])
            top = np.argpartition(-s, k)[:k]
            top[np.argsort(-s[top], kind="stable")]

    t_ok, _ = _timed(run_okapi, "okapi")
    qps["okapi"] = len(sample) / t_ok

    # sanity: limelight's and bm25s's top-k agree (bm25s pads short rows with zero-score
    # documents and orders ties arbitrarily, so documents tied at the k-th score are excluded)
    d_ll, s_ll = res_ll
    d_bm, s_bm = res_bm
    has = d_ll >= 0
    score_diff = float(np.abs(s_ll[has] - s_bm[has]).max()) if has.any() else 0.0
    same_sets = 0
    for i in range(nq):
        n = int(has[i].sum())
        if n == 0:
            same_sets += bool((s_bm[i] == 0).all())
            continue
        last = s_ll[i, n - 1]
        a = set(d_ll[i, :n][s_ll[i, :n] > last].tolist())
        b = set(d_bm[i][s_bm[i] > last].tolist())
        same_sets += a == b
    same_sets /= nq

    print()
    print("| engine | queries/s | ratio to bm25s (numba, 1 thread) |")
    print("|---|---|---|")
    rows = [
        ("limelight, 1 thread, end to end (analysis included)", qps["ll1"]),
        ("limelight, 1 thread, kernel only (pre-analyzed query vectors)", qps["ll1k"]),
        ("bm25s 0.3.16, numba backend, 1 thread (pre-computed token ids)", qps["bm"]),
        (f"rank_bm25 BM25Okapi ({len(sample)}-query sample)", qps["okapi"]),
        (f"limelight, {p} threads, end to end", qps[f"ll{p}"]),
        (f"limelight, {p} threads, kernel only", qps[f"ll{p}k"]),
        ("query analysis alone, compiled (numba), 1 thread", qps["an1"]),
        (f"query analysis alone, compiled (numba), {p} threads", qps[f"an{p}"]),
        ("query analysis alone, Python reference (before issue 20)", qps["anref"]),
    ]
    for name, v in rows:
        print(f"| {name} | {v:,.0f} | {v / qps['bm']:.2f}× |")
    print()
    a_end = qps[f"ll{p}"] / qps["ll1"]
    a_bm = qps["ll1"] / qps["bm"]
    print(f"ACCEPTANCE end to end, {p} threads / 1 thread: {a_end:.2f}× (target ≥ 1.7×: "
          f"{'met' if a_end >= 1.7 else 'NOT met'}); scoring alone (kernel) {p} threads / "
          f"1 thread: {qps[f'll{p}k'] / qps['ll1k']:.2f}×; analysis alone "
          f"{qps[f'an{p}'] / qps['an1']:.2f}×")
    print(f"ACCEPTANCE end to end, 1 thread / bm25s numba 1 thread: {a_bm:.2f}× (target ≥ 2.5×: "
          f"{'met' if a_bm >= 2.5 else 'NOT met'}); {p} threads / bm25s numba 1 thread: "
          f"{qps[f'll{p}'] / qps['bm']:.2f}×")
    record(f"BM25 end to end, {p} threads / 1 thread (Debian × whole log, top 100)", qps[f"ll{p}"],
           unit=" q/s", anchor=f"limelight 1 thread {qps['ll1']:,.0f} q/s", ratio=a_end,
           target="≥ 1.7×", met=a_end >= 1.7)
    record("BM25 end to end, 1 thread / bm25s numba 1 thread", qps["ll1"], unit=" q/s",
           anchor=f"bm25s numba {qps['bm']:,.0f} q/s", ratio=a_bm, target="≥ 2.5×", met=a_bm >= 2.5)
    share = statistics.median(times["an1"]) / statistics.median(times["ll1"])
    print(f"query analysis share of the 1-thread end-to-end time: {share:.1%} (compiled; the "
          f"Python reference alone takes {statistics.median(times['anref']):.2f} s, "
          f"{statistics.median(times['anref']) / statistics.median(times['ll1']):.0%} of it)")
    print(f"limelight {p} threads / 1 thread: end to end {qps[f'll{p}'] / qps['ll1']:.2f}×, "
          f"kernel only {qps[f'll{p}k'] / qps['ll1k']:.2f}×")
    cpu = {n: nq / statistics.median(v) for n, v in CPU.items() if n != "okapi"}
    print(f"in process CPU time (less sensitive to other jobs on the machine), 1 thread: "
          f"limelight end to end {cpu['ll1']:,.0f} q/s ({cpu['ll1'] / cpu['bm']:.2f}× bm25s), "
          f"kernel only {cpu['ll1k']:,.0f} q/s ({cpu['ll1k'] / cpu['bm']:.2f}×), "
          f"bm25s {cpu['bm']:,.0f} q/s")
    print(f"CPU seconds (median) of the {p}-thread runs / the 1-thread runs: end to end "
          f"{cpu['ll1'] / cpu[f'll{p}']:.2f}, kernel only {cpu['ll1k'] / cpu[f'll{p}k']:.2f} "
          f"(1.00 = the parallel runs do no extra work; on an idle machine their wall-clock "
          f"speedup is about {p}× divided by this ratio)")
    print(f"limelight / rank_bm25: {qps['ll1'] / qps['okapi']:,.0f}× (1 thread, end to end)")
    paired = [a / b for a, b in zip(times["ll1"], times[f"ll{p}"], strict=True)]
    paired_k = [a / b for a, b in zip(times["ll1k"], times[f"ll{p}k"], strict=True)]
    print(f"{p} threads / 1 thread within each repeat (adjacent runs): end to end " +
          ", ".join(f"{x:.2f}" for x in paired) + f" (median {statistics.median(paired):.2f}); "
          f"kernel only " + ", ".join(f"{x:.2f}" for x in paired_k) +
          f" (median {statistics.median(paired_k):.2f}); 1-minute load average after each "
          f"repeat: " + ", ".join(f"{x:.2f}" for x in loads))
    if OTHERS:
        print("cores used by other processes during each timed run (0 = the machine was ours): " +
              "; ".join(f"{n} " + ", ".join(f"{x:.2f}" for x in OTHERS[n]) for n in times))
    print(f"medians of {args.repeats} interleaved repeats; seconds per repeat: " +
          "; ".join(f"{n} " + ", ".join(f"{x:.2f}" for x in v) for n, v in times.items()))
    print(f"check vs bm25s: max |score difference| over the top {k} = {score_diff:.2e}; "
          f"same top-{k} documents (those tied with the last one aside) for {same_sets:.1%} of "
          f"queries; "
          f"{p}-thread results identical to 1-thread: yes; compiled query analysis term ids "
          f"identical to the Python reference: {'yes' if same_ids else 'NO'}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
