"""Kind ``pyterrier`` with a real engine: PISA's BM25 (``pyterrier-pisa``, the engine in its
wheel, no Java) over the Debian catalog, fed a seeded sample of the real query log through the
kind; an audit of the catalog under limelight's BM25 and PISA's; the index built once and
reused; and the bad inputs (factory not found, not a transformer, unknown document ids, PyTerrier
missing), each one line.

PISA and limelight score with different BM25 idfs (PISA: ``max(ε, ln((N-df+.5)/(df+.5)))``), so
their rankings are compared loosely (mean top-10 overlap), never claimed equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from limelight._io import OutputRefusedError, read_owner
from limelight.audit.config import parse_config
from limelight.data import load_catalog, load_dataset, load_query_log
from limelight.errors import LimelightError, UnknownIdError
from limelight.retrieval.bm25 import BM25, BM25Index
from limelight.retrieval.spec import System
from limelight.retrieval.systems import (
    DETERMINISTIC,
    EXACT_REVERSE,
    LOCAL_INDEX,
    NEW_QUERIES,
    get_kind,
)

PISA = "limelight.retrieval.kinds.pyterrier:pisa_bm25"
REPO = Path(__file__).resolve().parents[1]


def _kind_module():
    """``limelight.retrieval.kinds.pyterrier``, imported through the registry (so that the
    shipped kinds register in their order, as ``kind_names()`` lists them, whatever imports
    this test module)."""
    return sys.modules[get_kind("pyterrier").open.__module__]


def _spec(factory: str = PISA, **params) -> System:
    return System.of("pyterrier", factory=factory, **params)


@pytest.fixture(scope="module")
def debian():
    return load_catalog("debian")


@pytest.fixture(scope="module")
def sample():
    """A seeded sample of 2,000 distinct queries of the shared log."""
    log = load_query_log()
    return log.take(np.sort(np.random.default_rng(41).choice(len(log), 2000, replace=False)))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pisa-work")


@pytest.fixture(scope="module")
def pisa(debian, work):
    return _spec().open(None, name="pisa", collection=debian, work_dir=work)


@pytest.fixture(scope="module")
def bm25(debian) -> BM25:
    return BM25(BM25Index.build(debian))


def _top(docs: np.ndarray) -> list[set[int]]:
    return [set(row[row >= 0].tolist()) for row in docs]


# ---- PISA's BM25 over the Debian catalog through the kind ---------------------------------------
def test_kind_is_registered_with_its_capabilities():
    kind = get_kind("pyterrier")
    assert kind.has(NEW_QUERIES) and kind.has(DETERMINISTIC)
    assert not kind.has(EXACT_REVERSE) and not kind.has(LOCAL_INDEX) and not kind.needs_index
    assert kind.defaults() == {"batch_size": 1000, "deterministic": True}
    assert _spec().settings() == {"kind": "pyterrier", "batch_size": 1000, "deterministic": True,
                                  "factory": PISA}


def test_pisa_bm25_over_debian_through_the_kind(debian, sample, pisa, bm25):
    assert isinstance(pisa, _kind_module().PyTerrierRetriever) and pisa.doc_ids is debian.ids
    run = pisa.retrieve(sample, 10)
    assert run.qids is sample.ids and run.docids is debian.ids and run.name == "pisa"
    assert (run.depths() <= 10).all()
    # the same tokens reach both engines: the same queries find something
    ref_docs, _ = bm25.search_batch(sample.texts.tolist(), 10)
    assert np.array_equal(run.depths() > 0, ref_docs[:, 0] >= 0)
    assert (run.depths() > 0).sum() > 1500
    # scores best first within each query; search_batch (what the exposure job reads) agrees
    for qi in range(0, len(sample), 97):
        s, e = run.offsets[qi], run.offsets[qi + 1]
        assert (np.diff(run.score[s:e]) <= 0).all()
    docs, scores = pisa.search_batch(sample.texts.tolist(), 10)
    assert docs.shape == (len(sample), 10) and scores.dtype == np.float32
    by_query = [set(run.d[run.offsets[i]:run.offsets[i + 1]].tolist()) for i in range(len(sample))]
    assert _top(docs) == by_query
    # deterministic: the same ranking again, in batches of another size too
    again = _kind_module().PyTerrierRetriever(pisa.transformer, debian.ids, name="pisa",
                                              batch_size=333)
    assert again.retrieve(sample, 10).to_dict() == run.to_dict()
    # two BM25s, two idfs: close rankings, not equal ones (loose, a real property of BM25)
    found = ref_docs[:, 0] >= 0
    overlap = np.mean([len(a & b) / len(a) for a, b, f in zip(_top(ref_docs), _top(docs), found,
                                                               strict=True) if f])
    print(f"top-10 overlap, PISA BM25 vs limelight BM25, {found.sum()} queries: {overlap:.3f}")
    assert overlap > 0.5


def test_exposure_store_through_the_kind(debian, sample, pisa, tmp_path):
    from limelight.exposure.compute import compute_exposure

    sub = sample.take(np.arange(300))
    st = compute_exposure(pisa, sub, tmp_path / "store", depth=100, shard_size=128)
    assert st.manifest["complete"] and st.doc_ids == debian.ids
    q, d, rank, _ = st.pair_arrays()
    run = pisa.retrieve(sub, 100)
    assert len(q) == len(run)
    for qi in (0, 7, 150, 299):
        got = d[q == qi][np.argsort(rank[q == qi])]
        assert set(got.tolist()) == set(run.d[run.offsets[qi]:run.offsets[qi + 1]].tolist())


def test_index_is_built_once_reused_and_rebuilt_for_other_settings(tmp_path):
    med = load_dataset("med").collection
    spec = _spec()
    spec.open(None, collection=med, work_dir=tmp_path)
    folder = tmp_path / "pisa-index"
    owner = read_owner(folder)
    assert owner is not None and owner["kind"] == _kind_module().PISA_INDEX
    built = (folder / "inv.docs").stat().st_mtime_ns
    spec.open(None, collection=med, work_dir=tmp_path)  # reused: nothing rebuilt
    assert (folder / "inv.docs").stat().st_mtime_ns == built
    # the score bounds PISA writes for (k1, b) are in the owner's list: nothing foreign appears
    assert set(owner["files"]) == {p.name for p in folder.iterdir()} - {".limelight-output"}
    assert any(f.startswith("bm25.k1-0.9.b-0.4") for f in owner["files"])
    # other k1: built again, atomically, the old bounds gone
    _spec(args={"k1": 1.2}).open(None, collection=med, work_dir=tmp_path)
    files = {p.name for p in folder.iterdir()}
    assert any(f.startswith("bm25.k1-1.2.b-0.4") for f in files)
    assert not any(f.startswith("bm25.k1-0.9") for f in files)
    # never into a folder limelight did not write: refused, the user's file kept
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(OutputRefusedError, match="not written by limelight"):
        _spec(args={"index": "mine"}).open(None, collection=med, base_dir=tmp_path)
    assert (mine / "notes.txt").read_text() == "keep me" and len(list(mine.iterdir())) == 1


# ---- an audit: limelight's BM25 and PISA's -------------------------------------------------
def test_audit_of_debian_with_bm25_and_pisa_end_to_end(tmp_path):
    """CPU: an audit of Debian with two engines, end to end."""
    from limelight.audit.layout import AuditDir
    from limelight.report import run_audit

    cfg = tmp_path / "audit.toml"
    cfg.write_text(textwrap.dedent(f"""\
        [audit]
        name = "debian-pisa"
        depth = 100
        cutoffs = [10, 100]
        seed = 0

        [collection]
        source = "debian"

        [queries]
        source = "log"
        sample = 400

        [stages]
        eqi = false
        robustness = false
        ctrlqgen = false
        rerank = false
        intervention = false

        [[systems]]
        name = "bm25"
        kind = "bm25"

        [[systems]]
        name = "pisa"
        kind = "pyterrier"
        factory = "{PISA}"
        args = {{ k1 = 0.9, b = 0.4 }}
        batch_size = 128
        """))
    out = tmp_path / "out"
    res = run_audit(cfg, out)
    systems = res["systems"]
    assert set(systems) == {"bm25", "pisa"}
    assert systems["pisa"]["settings"] == {"kind": "pyterrier", "args": {"k1": 0.9, "b": 0.4},
                                           "batch_size": 128, "deterministic": True,
                                           "factory": PISA}
    ad = AuditDir(out)
    bm, pi = ad.store("bm25"), ad.store("pisa")
    assert len(pi.queries) == len(bm.queries) == 400 and pi.doc_ids == bm.doc_ids
    assert systems["pisa"]["n_pairs"] > 10_000
    # the same queries expose documents under both; most of each top 10 is shared
    assert abs(systems["pisa"]["retrievable_fraction_c100"]
               - systems["bm25"]["retrievable_fraction_c100"]) < 0.05
    assert read_owner(out / "systems" / "pisa" / "pisa-index")["kind"] == _kind_module().PISA_INDEX
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "pisa" in report
    json.loads((out / "results.json").read_text())


# ---- bad input, one line each --------------------------------------------------------------
FACTORIES = '''
import pyterrier as pt
import pyterrier_pisa as pp

from limelight.data import load_dataset
from limelight.retrieval.kinds.pyterrier import pisa_bm25


def not_a_transformer():
    return {"k1": 0.9}


def an_indexer(work_dir):
    return pp.PisaIndex(str(work_dir / "idx"))


def rewriter():
    return pt.apply.query(lambda row: row["query"].upper())


def adi_bm25(work_dir):
    """PISA over another collection (adi): its docnos are not Debian's."""
    return pisa_bm25(load_dataset("adi").collection, work_dir)
'''


@pytest.fixture(scope="module")
def factories(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("factories")
    (base / "factories.py").write_text(FACTORIES)
    return base


def _config(factory: str | None, extra: str = "") -> str:
    line = f'factory = "{factory}"\n' if factory is not None else ""
    return ('[collection]\nsource = "adi"\n[[systems]]\nname = "p"\nkind = "pyterrier"\n'
            + line + extra)


@pytest.mark.parametrize("factory, message", [
    ("limelight.nope:make", "factory 'limelight.nope:make': no module named 'limelight.nope'"),
    (f"{PISA.split(':')[0]}:nope", "has no 'nope'"),
    (f"{PISA.split(':')[0]}:PISA_FORMAT", "PISA_FORMAT is a str, not a callable"),
    ("pisa_bm25", 'factory must be "module:callable"'),
    ("gone.py:make", "factory 'gone.py:make': no file"),
])
def test_factory_not_found_is_one_line(factory, message, debian, tmp_path):
    with pytest.raises(LimelightError) as e:
        parse_config(_config(factory), tmp_path / "audit.toml")
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(f"{tmp_path / 'audit.toml'}:3: systems.p: factory")
    with pytest.raises(LimelightError, match="factory"):
        _spec(factory).open(None, collection=debian, base_dir=tmp_path)


def test_parameters_are_checked_when_the_config_is_read(tmp_path):
    with pytest.raises(LimelightError, match='needs factory = "module:callable"'):
        parse_config(_config(None), tmp_path / "a.toml")
    with pytest.raises(LimelightError, match="args.collection is not an argument: the audit"):
        parse_config(_config(PISA, 'args = { collection = "x" }\n'), tmp_path / "a.toml")
    with pytest.raises(LimelightError, match="batch_size must be ≥ 1"):
        parse_config(_config(PISA, "batch_size = 0\n"), tmp_path / "a.toml")
    with pytest.raises(LimelightError, match="has no parameter 'k1'"):
        _spec(k1=0.9)
    cfg = parse_config(_config(PISA, "args = { k1 = 1.2 }\n"), tmp_path / "a.toml")
    assert cfg.systems[0].settings()["args"] == {"k1": 1.2}


def test_factory_from_a_file_beside_the_config(factories, debian, tmp_path):
    # both spellings resolve against base_dir: a file path and a module name
    for ref in ("factories.py:adi_bm25", "factories:adi_bm25"):
        r = _spec(ref).open(None, name="adi", collection=debian, base_dir=factories,
                            work_dir=tmp_path)
        assert isinstance(r, _kind_module().PyTerrierRetriever)
    cfg = parse_config(_config("factories:adi_bm25"), factories / "audit.toml")
    assert cfg.systems[0].params["factory"] == "factories:adi_bm25"


def test_factory_returning_no_transformer(factories, debian, tmp_path):
    ctx = {"collection": debian, "base_dir": factories, "work_dir": tmp_path}
    with pytest.raises(LimelightError) as e:
        _spec("factories:not_a_transformer").open(None, **ctx)
    assert str(e.value) == ("factory 'factories:not_a_transformer' returned a builtins.dict, not "
                            "a PyTerrier transformer (pyterrier.Transformer)")
    with pytest.raises(LimelightError, match=r"returned an indexer \(PisaIndex\), not a retrieval "
                                             r"transformer: return its retriever"):
        _spec("factories:an_indexer").open(None, **ctx)
    with pytest.raises(LimelightError, match="got an unexpected keyword argument 'k3'"):
        _spec(args={"k3": 1.0}).open(None, **ctx)
    with pytest.raises(LimelightError, match="missing a required argument: 'collection'"):
        _kind_module().make_transformer(PISA, {}, {"work_dir": tmp_path})
    with pytest.raises(LimelightError, match="needs a folder for its index"):
        _spec().open(None, collection=debian)
    # a transformer that rewrites queries but retrieves nothing: no results frame
    r = _spec("factories:rewriter").open(None, name="rw", **ctx)
    with pytest.raises(LimelightError, match=r"system 'rw': the transformer's results lack "
                                             r"column\(s\) docno, score \(has qid, query"):
        r.retrieve(load_dataset("adi").queries, 10)


def test_unknown_docnos_name_the_first_ones(factories, debian, sample, tmp_path):
    r = _spec("factories:adi_bm25").open(None, name="adi", collection=debian, base_dir=factories,
                                         work_dir=tmp_path)
    with pytest.raises(UnknownIdError) as e:
        r.retrieve(sample.take(np.arange(50)), 10)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("unknown document id '")
    assert "in the results of system 'adi', whose docnos must be the collection's ids (" in msg
    assert "unknown document ids: " in msg and msg.endswith(", ...)")
    with pytest.raises(UnknownIdError):
        r.search_batch(sample.texts[:50].tolist(), 10)


def test_missing_pyterrier_is_one_line_only_when_opened(tmp_path):
    """Without PyTerrier (its import blocked in a fresh interpreter), limelight imports, lists
    the kind and reads a configuration with it; opening the system names the extra."""
    code = textwrap.dedent(f"""
        import sys
        sys.modules["pyterrier"] = None  # as if not installed
        from limelight.audit.config import parse_config
        from limelight.data import load_dataset
        from limelight.errors import LimelightError
        from limelight.retrieval.spec import System
        from limelight.retrieval.systems import kind_names
        assert "pyterrier" in kind_names()
        parse_config('[collection]\\nsource = "adi"\\n[[systems]]\\nname = "p"\\n'
                     'kind = "pyterrier"\\nfactory = "{PISA}"\\n')
        try:
            System.of("pyterrier", factory="{PISA}").open(
                None, collection=load_dataset("adi").collection, work_dir={str(tmp_path)!r})
        except LimelightError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    hint = _kind_module().INSTALL_HINT
    assert out.stdout.strip() == hint
    assert "pip install 'limelight[terrier]'" in hint and "\n" not in hint
