"""An audit holds no document that no stage reads (issue 55: an audit of the 10M-line log in
``exposure compute``'s memory, ``benchmarks/audit_memory.py``, docs/scale.md). The collection is
read for its checks, size and fingerprint, then let go (``AuditDataset``); the BM25 index is
built by a child process that reads the collection itself, so that neither the collection
(Debian: ~240 MB) nor what the build leaves behind (~360 MB) stays in the audit's process; a
stage that reads documents reads the collection again, checked against the audit's fingerprint.
"""

from __future__ import annotations

import resource
import shutil

import numpy as np
import pandas as pd
import pytest
from _audits import BM25, CORE_OFF, tiny_adi_audit

from limelight.audit.config import parse_config
from limelight.audit.inputs import load_inputs
from limelight.audit.runner import AuditRunner
from limelight.data.loaders import data_root, load_dataset
from limelight.errors import LimelightError


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def test_an_audit_of_bm25_builds_its_index_in_a_child_and_holds_no_document(tmp_path, monkeypatch):
    """BM25 exposure, retrievability by group and the figures: the collection is never read
    again (``loaded`` stays false: the group field's values are kept when the audit starts),
    the index is built by a process the audit waited for (adi made a collection over
    ``IN_PROCESS_MAX_DOCS``, as Debian is), and it is the index ``build_index`` writes in the
    caller's process (the same BM25 arrays, the same stored documents)."""
    from limelight.retrieval.index_dir import build_index, load_docs

    monkeypatch.setattr("limelight.audit.collection.IN_PROCESS_MAX_DOCS", 0)
    toml = tiny_adi_audit("adi-no-documents", (*CORE_OFF, "topics", "intervention"), systems=BM25)
    toml = toml.replace("cutoffs = [10, 20]\n", 'cutoffs = [10, 20]\ngroup_field = "title"\n')
    runner = AuditRunner(parse_config(toml), tmp_path / "audit", quick=True)
    before = children_cpu()
    res = runner.run()
    assert children_cpu() > before  # the index's build ran in a child (none else is started)
    ds = runner.inputs.dataset
    assert not ds.loaded and ds._collection is None  # no stage read the documents
    assert res["collection"]["n_docs"] == ds.n_docs == 82
    assert runner.status("retrievability-bm25").result["n_groups"] > 1

    coll = load_dataset("adi").collection
    here = build_index(coll, tmp_path / "here")
    built = runner.dir.index_dir
    names = sorted(p.name for p in (here / "bm25").iterdir())
    assert names == sorted(p.name for p in (built / "bm25").iterdir()) and names
    for n in names:
        assert (built / "bm25" / n).read_bytes() == (here / "bm25" / n).read_bytes(), n
    a, b = load_docs(built), load_docs(here)
    assert a.ids.strings.tolist() == b.ids.strings.tolist() == coll.ids.strings.tolist()
    assert a.texts.tolist() == b.texts.tolist() == coll.texts.tolist()
    groups = pd.read_parquet(runner.dir.retrievability_path("bm25"))["title"].tolist()
    assert groups == [str(v) for v in coll.fields["title"].tolist()]


@pytest.fixture
def own_adi(tmp_path):
    """A copy of adi in a folder of the test's own (its documents can change)."""
    folder = tmp_path / "adi"
    shutil.copytree(data_root() / "collections" / "adi", folder)
    return folder


def test_a_small_collection_is_indexed_in_the_audits_process(tmp_path):
    """A collection of at most ``IN_PROCESS_MAX_DOCS`` documents (adi's 82) is indexed in the
    audit's process, where a child's start would cost ten times the build: no child is started,
    the collection is not held, and the files are those ``build_index`` writes."""
    from limelight.audit.collection import IN_PROCESS_MAX_DOCS, build_bm25
    from limelight.retrieval.index_dir import build_index, load_docs

    ds = load_inputs(parse_config(tiny_adi_audit("adi-here", CORE_OFF))).dataset
    assert ds.n_docs <= IN_PROCESS_MAX_DOCS
    before = children_cpu()
    build_bm25(ds, tmp_path / "index")
    assert children_cpu() == before and not ds.loaded
    built, here = tmp_path / "index", build_index(load_dataset("adi").collection, tmp_path / "here")
    names = sorted(p.name for p in (here / "bm25").iterdir())
    assert names == sorted(p.name for p in (built / "bm25").iterdir()) and names
    for n in names:
        assert (built / "bm25" / n).read_bytes() == (here / "bm25" / n).read_bytes(), n
    a, b = load_docs(built), load_docs(here)
    assert a.ids.strings.tolist() == b.ids.strings.tolist() and a.texts.tolist() == b.texts.tolist()


def test_a_stage_that_reads_documents_reads_them_again_checked(own_adi, tmp_path, monkeypatch):
    """``AuditDataset.collection`` reads the collection again, the same documents as the audit
    started on; a collection that changed since is a one-line error, there, in the audit's
    process that builds a small collection's index and in the child that builds a larger one's
    (either then writes nothing)."""
    from limelight.audit.stages.index import build_bm25

    toml = tiny_adi_audit("adi-reread", CORE_OFF).replace('source = "adi"', f'source = "{own_adi}"')
    ds = load_inputs(parse_config(toml)).dataset
    assert not ds.loaded
    coll, want = ds.collection, load_dataset(str(own_adi)).collection
    assert ds.loaded and ds.collection is coll
    assert coll.ids.strings.tolist() == want.ids.strings.tolist()
    assert coll.texts.tolist() == want.texts.tolist()
    np.testing.assert_array_equal(ds.field("title"), want.fields["title"])

    ds = load_inputs(parse_config(toml)).dataset
    docs = own_adi / "docs.jsonl"
    docs.write_text("".join(docs.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]),
                    encoding="utf-8")
    with pytest.raises(LimelightError, match="the collection changed while the audit ran"):
        build_bm25(ds, tmp_path / "index")  # in this process (adi is small)
    assert not (tmp_path / "index").exists()
    monkeypatch.setattr("limelight.audit.collection.IN_PROCESS_MAX_DOCS", 0)
    with pytest.raises(LimelightError, match="the collection changed while the audit ran"):
        build_bm25(ds, tmp_path / "index")  # in a child, as a larger collection's
    assert not (tmp_path / "index").exists()
    with pytest.raises(LimelightError, match="the collection changed while the audit ran"):
        ds.collection  # noqa: B018
