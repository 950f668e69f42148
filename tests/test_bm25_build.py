"""The streaming BM25 build (issue 44, item 2): documents read and analyzed in chunks, postings
spilled and laid out from disk, within a memory budget — and the same index files, byte for
byte, as ``BM25Index.build(collection).save(path)``, on the shared collections."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from _inproc import run_cli

from limelight.analysis import Analyzer
from limelight.data import load_dataset
from limelight.data.collection import Collection
from limelight.data.ids import IdMap
from limelight.data.loaders import load_collection
from limelight.data.stream import document_chunks, iter_jsonl_docs, slices
from limelight.errors import FormatError, LimelightError
from limelight.retrieval.bm25 import BM25Index
from limelight.retrieval.bm25_build import BM25Builder, _pieces
from limelight.retrieval.index_dir import build_index, build_index_from, load_docs
from limelight.retrieval.index_meta import FORMAT

FILES = ("indptr.npy", "docs.npy", "tf.npy", "doc_len.npy", "meta.json")


def _same_files(a, b) -> None:
    for f in FILES:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def _stream(coll: Collection, folder, analyzer: Analyzer, chunk_chars: int | None, step: int):
    folder.mkdir()
    b = BM25Builder(folder, analyzer, chunk_chars=chunk_chars)
    for i in range(0, len(coll), step):
        b.add(coll.texts[i:i + step].tolist())
    b.finish(coll.ids.strings.tolist(), coll.name)
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)  # the spill is gone
    return folder


@pytest.mark.parametrize("name", ["npl", "scifact", "cacm"])
@pytest.mark.parametrize("stem", [None, "english"])
def test_streaming_build_writes_the_same_bytes(tmp_path, name, stem):
    """Batches of every size (one batch; ~5,000 characters; 300 characters, where most
    documents are longer than a batch and analyzed in pieces) and chunks of 777 documents."""
    coll = load_dataset(name).collection
    an = Analyzer(stemmer=stem)
    ref = BM25Index.build(coll, an).save(tmp_path / "ref")
    for cc in (None, 5000, 300):
        _same_files(ref, _stream(coll, tmp_path / f"s{cc}", an, cc, 777))


def test_long_documents_are_analyzed_in_pieces_with_the_same_tokens(tmp_path):
    """Pieces end after a whitespace character of any kind; a final sigma, a word longer than a
    piece, a text without whitespace, stopwords and stems all read as in the whole text."""
    rng = np.random.default_rng(0)
    words = np.array(["ΟΔΟΣ", "σοφίας", "Straße", "the", "and", "running", "runs", "İstanbul",
                      "x" * 5000, "a1", "protein", "Σ", "of"], dtype=object)
    seps = np.array([" ", "\n", "\t", "\u3000", "\u00a0", " \u2003 ", ", ", "—"], dtype=object)
    def text(n: int) -> str:
        w = words[rng.integers(0, len(words), n)]
        s = seps[rng.integers(0, len(seps), n)]
        return "".join(a + b for a, b in zip(w.tolist(), s.tolist(), strict=True))
    texts = [text(20_000), "short one", "", "nospace" * 3000, text(5), text(40_000) + "ΟΔΟΣ"]
    coll = Collection(IdMap([f"d{i}" for i in range(len(texts))], kind="document"),
                      np.asarray(texts, dtype=object), name="long")
    for cc in (997, 64):
        for piece_text in texts:
            parts = list(_pieces(piece_text, cc))
            assert "".join(parts) == piece_text
            assert all(p[-1].isspace() for p in parts[:-1])
    for stem in (None, "english"):
        an = Analyzer(stemmer=stem)
        ref = BM25Index.build(coll, an).save(tmp_path / f"ref{stem}")
        for cc in (997, 64):
            _same_files(ref, _stream(coll, tmp_path / f"s{stem}{cc}", an, cc, 2))


def _write_jsonl(path, n: int, extra: dict | None = None) -> None:
    rows = []
    for i in range(n):
        r = {"id": f"d{i}", "title": f"title {i}", "text": f"words number {i} protein folding"}
        if i % 3 == 0:
            r["tags"] = ["a", "b"] if i % 2 else None
        if i % 5 == 0:
            r["year"] = 1990 + i
        rows.append(json.dumps(r | (extra or {})))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def test_jsonl_chunks_equal_the_whole_file(tmp_path, data_dir):
    f = tmp_path / "docs.jsonl"
    _write_jsonl(f, 2500)
    whole = load_collection(f)
    for size in (1, 10_000, 1 << 30):
        parts = list(iter_jsonl_docs(f, size, name="docs"))
        assert len(parts) > 1 or size == 1 << 30
        assert len(parts[0]) >= 1000 or len(parts) == 1  # the first 1,000 decide the fields
        ids = [x for p in parts for x in p.ids.strings.tolist()]
        assert ids == whole.ids.strings.tolist()
        assert [x for p in parts for x in p.texts.tolist()] == whole.texts.tolist()
        for k, v in whole.fields.items():
            assert [x for p in parts for x in p.fields[k].tolist()] == v.tolist()
    src = document_chunks("cacm", 50_000)
    assert src.streamed and src.name == "cacm"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = [x for c in src.chunks for x in c.ids.strings.tolist()]
    assert got == load_dataset("cacm").collection.ids.strings.tolist()
    assert sum("duplicate document id" in str(x.message) for x in w) == 1
    assert not document_chunks("debian").streamed


def test_index_directory_streamed_from_a_file(tmp_path):
    """``build_index_from`` on a JSONL file (streamed) writes the BM25 files and meta.json of the
    in-memory build, and docs.parquet with the same documents and fields."""
    f = tmp_path / "docs.jsonl"
    _write_jsonl(f, 3000)
    coll = load_collection(f)
    a = build_index_from(f, tmp_path / "a", memory_gb=0.0002)  # batches of ~2,000 characters
    b = build_index(coll, tmp_path / "b", memory_gb=0.0002)
    ref = BM25Index.build(coll).save(tmp_path / "ref")
    _same_files(ref, a / "bm25")
    _same_files(ref, b / "bm25")
    expect = {"format": FORMAT, "collection": "docs", "n_docs": 3000, "built": ["bm25"],
              "text_fields": ["title", "text"]}
    assert (a / "meta.json").read_text() == json.dumps(expect, indent=1)
    assert (a / "meta.json").read_bytes() == (b / "meta.json").read_bytes()
    # docs.parquet: what the previous release wrote (pandas), read back the same
    old = _previous_docs_frame(coll)
    old.to_parquet(tmp_path / "old.parquet", index=False)
    old = pd.read_parquet(tmp_path / "old.parquet")
    assert list(old.columns) == ["doc_id", "text", "title", "field_text", "tags", "year"]
    for d in (a, b):
        new = pd.read_parquet(d / "docs.parquet")
        assert list(new.columns) == list(old.columns)
        for c in old.columns:
            assert _plain(new[c]) == _plain(old[c]), c
        docs = load_docs(d)
        assert docs.ids == coll.ids and docs.texts.tolist() == coll.texts.tolist()


def _previous_docs_frame(collection: Collection) -> pd.DataFrame:
    """docs.parquet's frame as the previous release built it (``index_dir._docs_frame``)."""
    def cell(x):
        return json.dumps(x, default=str) if isinstance(x, list | dict) else (None if x is None else str(x))

    fields = {f"field_{k}" if k in ("text", "doc_id") else k: [cell(x) for x in v.tolist()]
              for k, v in collection.fields.items()}
    return pd.DataFrame({"doc_id": [str(x) for x in collection.ids.strings.tolist()],
                         "text": [str(x) for x in collection.texts.tolist()], **fields})


def _plain(col: pd.Series) -> list:
    return [None if pd.isna(x) else x for x in col.tolist()]


def test_stream_errors_name_the_line_and_leave_nothing(tmp_path):
    f = tmp_path / "docs.jsonl"
    _write_jsonl(f, 1500)
    lines = f.read_text().splitlines()
    for bad, words in ((lines[:1400] + ["{oops"] + lines[1400:], ":1401: invalid JSON"),
                       (lines + [lines[1200]], ":1501: duplicate document id 'd1200'"),
                       (lines[:1300] + ['{"id": "x y", "text": "t"}'], ":1301: document id 'x y'"),
                       ([""], ": no documents")):
        f.write_text("\n".join(bad) + "\n")
        out = tmp_path / "idx"
        with pytest.raises(FormatError, match=words) as e:
            build_index_from(f, out, memory_gb=0.0001)
        assert "\n" not in str(e.value)
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]
    with pytest.raises(LimelightError, match="must be positive"):
        build_index_from(f, tmp_path / "idx", memory_gb=0)


def test_cli_memory_budget(tmp_path):
    f = tmp_path / "docs.jsonl"
    _write_jsonl(f, 1200)
    run = ["index", "--collection", str(f)]  # in this process (tests/_inproc.py)
    p = run_cli(*run, "--out", str(tmp_path / "idx"), "--memory-gb", "0.001")
    assert p.returncode == 0 and "indexed 1,200 documents of docs" in p.stdout, p.stderr
    _same_files(BM25Index.build(load_collection(f)).save(tmp_path / "ref"), tmp_path / "idx" / "bm25")
    p = run_cli(*run, "--out", str(tmp_path / "idx2"), "--memory-gb", "0")
    assert p.returncode == 2 and p.stderr.strip() == "error: --memory-gb must be positive, got 0.0"


def test_slices_cover_the_collection():
    coll = load_dataset("adi").collection
    for size in (1, 500, 10**9):
        parts = list(slices(coll, size))
        assert [x for p in parts for x in p.ids.strings.tolist()] == coll.ids.strings.tolist()
        assert size != 1 or len(parts) == len(coll)
