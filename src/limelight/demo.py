"""``make demo``: retrieval effectiveness on a shared collection, then an exposure audit of the
Debian catalog under the real query log, written as an HTML report.

Run with ``python -m limelight.demo [--out DIR] [--quick]``. Stages read what they need from
``../shared/data`` and cache embeddings under ``.cache/``.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from limelight._io import atomic_path

console = Console()


def effectiveness(name: str, cache: Path, dense: bool) -> dict:
    """BM25, dense and hybrid on a shared collection: nDCG@10 and R@100 from ir_measures."""
    import ir_measures
    from ir_measures import R, nDCG

    from limelight.data import load_dataset
    from limelight.retrieval.bm25 import BM25, BM25Index

    ds = load_dataset(name)
    qrels = ds.qrels.to_ir_measures()
    bm25 = BM25(BM25Index.build(ds.collection), k1=0.9, b=0.4)
    systems = {"BM25 (k1=0.9, b=0.4)": bm25}
    if dense:
        from limelight.retrieval.dense import DenseIndex, DenseRetriever, Encoder
        from limelight.retrieval.fusion import Hybrid

        enc = Encoder()
        dr = DenseRetriever(DenseIndex.build(ds.collection, enc, cache_dir=cache / "embeddings",
                                             show_progress=True), enc)
        systems["MiniLM (FAISS flat)"] = dr
        systems["Hybrid (RRF k=60)"] = Hybrid(bm25, dr)
    out = {}
    for label, retr in systems.items():
        t = time.perf_counter()
        run = retr.retrieve(ds.queries, 1000)
        secs = time.perf_counter() - t
        agg = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], qrels, run.to_ir_measures())
        out[label] = {"nDCG@10": agg[nDCG @ 10], "R@100": agg[R @ 100], "seconds": secs}
        console.print(f"  {name} {label:<22} nDCG@10 {agg[nDCG @ 10]:.4f}  R@100 {agg[R @ 100]:.4f}")
    return out


def exposure_audit(out: Path, quick: bool) -> dict:
    """Exact exposure of the Debian catalog under the query log with BM25; retrievability."""
    from limelight.data import load_catalog, load_query_log
    from limelight.exposure.exact import compute_exposure
    from limelight.exposure.plots import plot_lorenz, plot_rank_size
    from limelight.exposure.retrievability import group_retrievability
    from limelight.retrieval.bm25 import BM25, BM25Index

    coll = load_catalog("debian")
    queries = load_query_log()
    if quick:
        queries = queries.sample(5000, seed=0)
    bm25 = BM25(BM25Index.build(coll), k1=0.9, b=0.4)
    t = time.perf_counter()
    store = compute_exposure(bm25, queries, out / "exposure-bm25", depth=100)
    secs = time.perf_counter() - t
    res = {"n_queries": len(queries), "n_docs": len(coll), "seconds": secs, "cutoffs": {}}
    r_by_c = {}
    for c in (10, 100):
        rv = store.retrievability(c=c)
        r_by_c[c] = rv.r
        res["cutoffs"][c] = rv.to_dict()
        console.print(f"  BM25 c={c:<3} Gini {rv.gini:.3f}  retrievable {rv.retrievable_fraction:.3f}")
    groups = group_retrievability(r_by_c[100], coll.fields["section"])
    res["sections_top"] = groups.head(10).to_dict("records")
    res["sections_bottom"] = groups.tail(10).to_dict("records")
    plots = out / "plots"
    lorenz = plot_lorenz({f"BM25 c={c}": r for c, r in r_by_c.items()}, plots / "lorenz")
    ranksize = plot_rank_size({"BM25": store.n_exposing()}, plots / "rank_size")
    res["plots"] = [str(p) for p in [*lorenz, *ranksize]]
    return res


def _img(path: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img alt="{html.escape(Path(path).name)}" src="data:image/png;base64,{data}">'


def write_report(out: Path, eff: dict, audit: dict, collection: str) -> Path:
    """A self-contained HTML page (plots embedded)."""
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v['nDCG@10']:.4f}</td><td>{v['R@100']:.4f}</td></tr>"
                   for k, v in eff.items())
    cut = "".join(f"<tr><td>{c}</td><td>{v['gini']:.4f}</td><td>{v['gini_retrieved_only']:.4f}</td>"
                  f"<td>{v['retrievable_fraction']:.4f}</td></tr>" for c, v in audit["cutoffs"].items())

    def sec_rows(recs):
        return "".join(f"<tr><td>{html.escape(str(r['group']))}</td><td>{r['n_docs']}</td>"
                       f"<td>{r['r_mean']:.3f}</td></tr>" for r in recs)

    pngs = "".join(_img(p) for p in audit["plots"] if p.endswith(".png"))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>limelight demo</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.2em .6em}}img{{max-width:48%}}</style></head><body>
<h1>limelight: exposure audit (demo)</h1>
<h2>Retrieval effectiveness on {html.escape(collection)}</h2>
<table><tr><th>system</th><th>nDCG@10</th><th>R@100</th></tr>{rows}</table>
<h2>Retrievability of the Debian catalog under the query log (BM25, depth 100)</h2>
<p>{audit['n_queries']} distinct queries (weight o_q = occurrences in the log), {audit['n_docs']} packages.
Gini over every package of the catalog; the retrieved-only Gini is given for comparison only.</p>
<table><tr><th>c</th><th>Gini</th><th>Gini (retrieved only)</th><th>retrievable fraction</th></tr>{cut}</table>
<h3>Most retrievable sections (mean r(d), c=100)</h3><table><tr><th>section</th><th>packages</th><th>mean r</th></tr>{sec_rows(audit['sections_top'])}</table>
<h3>Least retrievable sections</h3><table><tr><th>section</th><th>packages</th><th>mean r</th></tr>{sec_rows(audit['sections_bottom'])}</table>
<h2>Plots</h2>{pngs}
<p>Reproduce: <code>make demo</code> (or <code>python -m limelight.demo --out DIR</code>).</p>
</body></html>"""
    path = out / "report.html"
    with atomic_path(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m limelight.demo", description=__doc__)
    ap.add_argument("--out", default="demo-out", help="output directory")
    ap.add_argument("--collection", default="scifact", help="shared collection for effectiveness")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense and hybrid systems")
    ap.add_argument("--quick", action="store_true", help="a 5,000-query sample of the log")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(".cache")
    console.rule(f"[bold]1. retrieval effectiveness on {args.collection}")
    eff = effectiveness(args.collection, cache, dense=not args.no_dense)
    console.rule("[bold]2. exposure audit: Debian catalog × query log")
    audit = exposure_audit(out, args.quick)
    report = write_report(out, eff, audit, args.collection)
    with atomic_path(out / "results.json") as tmp:
        tmp.write_text(json.dumps({"effectiveness": eff, "exposure": audit}, indent=1,
                                  default=lambda o: o.item() if isinstance(o, np.generic) else str(o)))
    console.print(f"\nreport: [bold]{report.resolve()}[/bold]\nresults: {(out / 'results.json').resolve()}")


if __name__ == "__main__":
    main()
