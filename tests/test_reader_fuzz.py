"""Fuzz-style robustness of the readers (issue 24): truncated, binary, non-UTF-8 and oversized
inputs either parse or raise ``LimelightError`` (one line naming the file), never another
exception type. Deterministic (``derandomize=True``) and fast."""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from limelight.audit.config import load_config
from limelight.data.formats import (
    read_jsonl_docs,
    read_queries_tsv,
    read_trec_qrels,
    read_trec_run,
    read_trec_runs,
)
from limelight.errors import LimelightError

FUZZ = settings(derandomize=True, max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SEEDS = {
    "run": b"q1 Q0 d1 1 2.5 tag\nq1 Q0 d2 2 1.5 tag\nq2\tQ0\td3\t1\t0.5\ttag\n",
    "qrels": b"q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 2\n",
    "docs": b'{"id": "d1", "title": "A title", "text": "Some text."}\n'
            b'{"id": "d2", "text": "More text \\u00e9."}\n',
    "queries": b"q1\tfirst query\nq2\tsecond query\n",
    "toml": b'[audit]\nname = "fuzz"\ndepth = 10\n\n[collection]\nsource = "adi"\n\n'
            b'[[systems]]\nname = "bm25"\nkind = "bm25"\n',
}
SUFFIX = {"run": ".run", "qrels": ".qrels", "docs": ".jsonl", "queries": ".tsv", "toml": ".toml"}


def _read(kind: str, path: Path):
    if kind == "run":
        return read_trec_run(path)
    if kind == "qrels":
        return read_trec_qrels(path)
    if kind == "docs":
        return read_jsonl_docs(path)
    if kind == "queries":
        return read_queries_tsv(path)
    return load_config(path)


def _check(kind: str, data: bytes, gz: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("input" + SUFFIX[kind] + (".gz" if gz else ""))
        path.write_bytes(data)
        try:
            _read(kind, path)
        except LimelightError as e:
            msg = str(e)
            assert "\n" not in msg and str(path) in msg, msg
        if kind == "run":  # the many-runs reader behaves the same
            try:
                read_trec_runs([path, path])
            except LimelightError as e:
                assert "\n" not in str(e) and str(path) in str(e)


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    """A seed file truncated, with bytes inserted or replaced, or repeated to a large size."""
    how = draw(st.sampled_from(["truncate", "insert", "replace", "latin1", "oversize", "binary"]))
    if how == "truncate":
        return seed[:draw(st.integers(0, len(seed)))]
    if how == "binary":
        return draw(st.binary(max_size=200))
    if how == "latin1":
        return seed.replace(b"t", "\xe9".encode("latin-1"), 1) + b"\xff\xfe\n"
    if how == "oversize":
        reps = draw(st.integers(1, 3))
        return seed * (2000 * reps) + b"x" * draw(st.sampled_from([0, 100_000]))
    pos = draw(st.integers(0, len(seed)))
    junk = draw(st.binary(min_size=1, max_size=8) | st.sampled_from(
        [b"\x00", b"\r", b"\x0b", b"\xc2\xa0", b"\xe2\x80\xa8", b"#", b'"', b" ", b"\t", b"\n",
         b"nan", b"inf", b"-", b"[", b"{", b"=", b"\\", b"1e999"]))
    if how == "insert":
        return seed[:pos] + junk + seed[pos:]
    return seed[:pos] + junk + seed[pos + len(junk):]


@pytest.mark.parametrize("kind", sorted(SEEDS))
@FUZZ
@given(data=st.data())
def test_readers_raise_only_limelight_errors(kind, data):
    _check(kind, data.draw(mutated(SEEDS[kind])))


@pytest.mark.parametrize("kind", ["run", "qrels", "docs"])
@FUZZ
@given(data=st.data())
def test_gzipped_inputs_raise_only_limelight_errors(kind, data):
    payload = data.draw(mutated(SEEDS[kind]))
    blob = gzip.compress(payload)
    cut = data.draw(st.sampled_from([len(blob), len(blob) // 2, 10, 3]))
    flip = data.draw(st.booleans())
    blob = blob[:cut]
    if flip and len(blob) > 12:
        blob = blob[:12] + bytes([blob[12] ^ 0xFF]) + blob[13:]
    _check(kind, blob, gz=True)


# the audit-config seed names a collection: its validity is tested in test_audit_config
@pytest.mark.parametrize("kind", sorted(k for k in SEEDS if k != "toml"))
def test_seeds_parse(kind):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("input" + SUFFIX[kind])
        path.write_bytes(SEEDS[kind])
        assert _read(kind, path) is not None


@pytest.mark.parametrize("kind, data", [
    ("docs", b"[" * 100_000 + b"\n"),  # json's recursion limit
    ("docs", b'{"id": "d1", "text": "x"}\n' + b"\xff\n"),
    ("run", b"q1 Q0 " + b"d" * 1_000_000 + b" 1 1.0 t\n"),  # one oversized id
    ("qrels", b"q1 0 d1 1\x00\n"),
    ("queries", b"\xef\xbb\xbfq1\tquery\n\xff\tx\n"),
    ("toml", b"[audit\n"),
    ("toml", b"\xff\xfe[audit]\n"),
])
def test_known_hard_cases(kind, data):
    _check(kind, data)
