"""CtrlQGen data side: serialization, schemas, appendix A functions, WeakLabeling-Un/-IP, Click
sets, generate_queries' fallback and the `limelight generate` CLI (real catalogs, real MiniLM)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from limelight.cli import app
from limelight.data import load_catalog
from limelight.data.collection import Collection
from limelight.data.loaders import CATALOG_SCHEMAS
from limelight.errors import FormatError, LimelightError
from limelight.querygen.generator import generate_queries
from limelight.querygen.serialize import (
    SEP,
    Schema,
    load_schema,
    serialize_collection,
    serialize_entity,
)
from limelight.querygen.weaklabel import (
    WeakLabelingUn,
    click_dataset,
    qv_misspelling,
    qv_ordering,
    qv_prefix_query,
    sample_words,
    weaklabel_ip,
)


@pytest.fixture(scope="module")
def debian_head():
    full = load_catalog("debian")
    idx = np.arange(0, len(full), 40)  # ~1,600 real packages across the alphabet
    return Collection(full.ids.__class__(full.ids.strings[idx], kind="document"), full.texts[idx],
                      {k: v[idx] for k, v in full.fields.items()}, "debian-sample")


# ---- serialization and schemas ------------------------------------------------------------


def test_serialize_debian_entity(debian_head):
    s = load_schema("debian")
    i = 0
    out = serialize_collection(debian_head, s, [i])[0]
    f = {k: debian_head.fields[k][i] for k in s.names}
    parts = out.split(f" {SEP} ")
    assert parts[0] == f"name: {f['name']}"
    assert parts[1] == f"summary: {f['summary']}"
    assert parts[2] == f"section: {f['section']}"
    if f["tags"]:
        assert parts[3] == "tags: " + ", ".join(f["tags"])
    desc = parts[-1]
    assert desc.startswith("description: ")
    words = " ".join(f["description"].split()).split(" ")
    assert desc[len("description: "):] == " ".join(words[:50])


def test_serialize_omits_empty_fields_and_keeps_order(movies):
    s = load_schema("movies")
    e = {"Title": "Alien", "Director": None, "Distributor": "  ", "Major Genre": "Horror",
         "Creative Type": float("nan"), "Source": None, "MPAA Rating": "R"}
    assert serialize_entity(e, s) == f"Title: Alien {SEP} Major Genre: Horror {SEP} mpaa rating: R"


def test_entity_with_every_field_empty_is_an_error():
    s = load_schema("movies")
    with pytest.raises(LimelightError, match="'m1'.*every field"):
        serialize_entity({"Title": None, "Director": ""}, s, "m1")


def test_shipped_schemas_match_the_catalog_loader_roles():
    for name in ("debian", "movies"):
        s = load_schema(name)
        ref = CATALOG_SCHEMAS[name]
        assert (s.narrow, s.broad, s.broad_ft) == (ref["narrow"], ref["broad"], ref["broad_ft"])


def test_schema_naming_a_missing_field(tmp_path, movies):
    p = tmp_path / "bad.toml"
    p.write_text('narrow = ["Title", "Studio"]\nbroad = ["Major Genre"]\n')
    s = load_schema(p)
    with pytest.raises(LimelightError, match="'Studio'.*lacks"):
        s.check_collection(movies)
    with pytest.raises(LimelightError, match="'Studio'"):
        generate_queries(movies, s, "narrow", n=1, entity_ids=["movie00001"])


def test_schema_file_errors(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text('narrow = ["a"]\nbroad = ["b"\n')
    with pytest.raises(FormatError, match="broken.toml"):
        load_schema(p)
    with pytest.raises(FormatError, match="unknown schema key"):
        Schema.from_dict({"narrow": ["a"], "broad": ["b"], "wide": ["c"]})
    with pytest.raises(FormatError, match="more than one role"):
        Schema.from_dict({"narrow": ["a"], "broad": ["a"]})
    with pytest.raises(FormatError, match="at least one narrow"):
        Schema.from_dict({"broad": ["a"]})
    with pytest.raises(LimelightError, match="no such schema"):
        load_schema("no-such-schema")


# ---- appendix A -----------------------------------------------------------------------------


def test_sample_words_fraction_and_order():
    words = [f"w{i}" for i in range(20)]
    rng = np.random.default_rng(0)
    P, Pr = (0.25, 0.5), (0.5, 0.5)
    sizes = set()
    for _ in range(200):
        out = sample_words(words, P, Pr, rng)
        pos = [words.index(w) for w in out]
        assert pos == sorted(set(pos))  # distinct, original order
        sizes.add(len(out))
    assert sizes == {5, 10}


def test_query_variations():
    rng = np.random.default_rng(1)
    q = "alpha beta gamma delta"
    for _ in range(50):
        v = qv_ordering(q, rng).split()
        diff = [i for i, (a, b) in enumerate(zip(v, q.split(), strict=True)) if a != b]
        assert sorted(v) == sorted(q.split()) and len(diff) == 2
        m = qv_misspelling(q, (0.5, 0.5), rng)
        if len(m) == len(q) - 1:
            assert any(q[:i] + q[i + 1:] == m for i in range(len(q)))
        else:
            assert len(m) == len(q) and sum(a != b for a, b in zip(m, q, strict=True)) <= 1
        p = qv_prefix_query(q, (0.25, 0.5), (0.5, 0.5), rng)
        assert q.startswith(p) and len(p) in (int(0.75 * len(q)), int(0.5 * len(q)),
                                              len(q[:int(0.75 * len(q))].rstrip()),
                                              len(q[:int(0.5 * len(q))].rstrip()))


# ---- WeakLabeling-Un --------------------------------------------------------------------------


def _plain(lab):
    lab.p_ordering = lab.p_misspelling = lab.p_prefix = 0.0
    return lab


def test_weaklabel_un_narrow_queries_come_from_narrow_fields(debian_head):
    s = load_schema("debian")
    lab = _plain(WeakLabelingUn(s)).fit(debian_head)
    idx = np.arange(len(debian_head))
    ei, it, qs = lab.generate(idx, "narrow", seed=3)
    assert len(qs) == len(idx) and set(it) == {"narrow"}
    for i, q in zip(ei.tolist(), qs.tolist(), strict=True):
        vocab = set(f"{debian_head.fields['name'][i]} {debian_head.fields['summary'][i]}".lower().split())
        assert set(q.split()) <= vocab


def test_weaklabel_un_broad_queries_and_determinism(debian_head):
    s = load_schema("debian")
    lab = _plain(WeakLabelingUn(s)).fit(debian_head)
    idx = np.arange(300)
    ei, it, qs = lab.generate(idx, "broad", seed=4)
    again = lab.generate(idx, "broad", seed=4)[2]
    assert qs.tolist() == again.tolist()
    narrow_hit = 0
    for i, q in zip(ei.tolist(), qs.tolist(), strict=True):
        text = " ".join([str(debian_head.fields["section"][i]),
                         " ".join(debian_head.fields["tags"][i] or []).replace("::", " ").replace("-", " "),
                         str(debian_head.fields["description"][i])]).lower()
        assert all(w in text for w in q.split()), (i, q)
        narrow_hit += q == str(debian_head.fields["name"][i]).lower()
    assert narrow_hit < len(qs) * 0.05


def test_idf_sampling_prefers_rare_words(debian_head):
    s = load_schema("debian")
    lab = WeakLabelingUn(s).fit(debian_head)
    rng = np.random.default_rng(0)
    text = "this package provides the library for parsing xmpp stanzas"
    counts: dict[str, int] = {}
    for _ in range(400):
        for w in lab.ft_query(text, rng).split():
            counts[w] = counts.get(w, 0) + 1
    assert lab._idf["xmpp"] > lab._idf["package"]
    assert counts.get("xmpp", 0) > counts.get("package", 0)


def test_click_dataset(movies):
    cs = click_dataset(movies, "movies", n_queries=2000, p_narrow=0.75, n_broad_test=200, seed=0)
    n = sum(len(cs.queries[s]) for s in ("train", "val", "test"))
    intents = np.concatenate([cs.queries[s].intents for s in ("train", "val", "test")])
    frac = float((intents == "narrow").mean())
    assert 0.7 < frac < 0.85 and n > 1500
    assert set(cs.queries["broad_test"].intents) == {"broad"}
    ids = [set(cs.queries[s].ids.strings.tolist()) for s in ("train", "val", "test")]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    qr = cs.qrels["test"].to_dict()
    for q, e in zip(cs.queries["test"].ids.strings.tolist(), cs.entity_idx["test"].tolist(), strict=True):
        assert qr[q] == {movies.ids.strings[e]: 1}


# ---- WeakLabeling-IP --------------------------------------------------------------------------


def test_weaklabel_ip_titles_narrow_genres_broad(movies):
    s = load_schema("movies")
    g = movies.fields["Major Genre"]
    t = movies.fields["Title"]
    d = movies.fields["Director"]
    idx = np.asarray([i for i in range(len(movies)) if g[i] and t[i] and d[i]][:40])
    titles = [t[i] for i in idx.tolist()]
    genres = [f"{g[i].lower()} movie" for i in idx.tolist()]
    lab_t = weaklabel_ip(titles, movies, s, idx)
    lab_g = weaklabel_ip(genres, movies, s, idx)
    assert (lab_t == "narrow").mean() >= 0.9
    assert (lab_g == "broad").mean() >= 0.8


# ---- generate_queries (WeakLabeling-Un fallback) ----------------------------------------------


def test_generate_queries_fallback(movies):
    qs = generate_queries(movies, "movies", "narrow", n=3, entity_ids=["movie00001", "movie00002"])
    assert len(qs) == 6 and set(qs.intents) == {"narrow"}
    assert qs.fields["entity_id"].tolist() == ["movie00001"] * 3 + ["movie00002"] * 3
    with pytest.raises(LimelightError, match="unknown intent 'wide'"):
        generate_queries(movies, "movies", "wide", n=1)
    with pytest.raises(LimelightError, match="nosuch"):
        generate_queries(movies, "movies", "broad", n=1, entity_ids=["nosuch"])


def test_generate_queries_empty_entity_is_an_error():
    recs = [{"id": "a", "Title": "Alien", "Major Genre": "Horror"},
            {"id": "b", "Title": None, "Major Genre": None}]
    coll = Collection.from_records(recs, ("Title",), "id", "tiny")
    s = Schema.from_dict({"narrow": ["Title"], "broad": ["Major Genre"]})
    with pytest.raises(LimelightError, match="'b'.*every field"):
        generate_queries(coll, s, "narrow", n=1)


# ---- CLI -------------------------------------------------------------------------------------


def test_cli_generate(tmp_path):
    r = CliRunner()
    res = r.invoke(app, ["generate", "--catalog", "movies", "--intent", "broad", "--n", "2",
                         "movie00001"])
    assert res.exit_code == 0, res.output
    lines = [x.split("\t") for x in res.stdout.strip().splitlines()]
    assert len(lines) == 2 and all(x[0] == "movie00001" and x[1] == "broad" for x in lines)
    res = r.invoke(app, ["generate", "--catalog", "movies", "--intent", "wide", "movie00001"])
    assert res.exit_code != 0
    bad = tmp_path / "s.toml"
    bad.write_text('narrow = ["Studio"]\nbroad = ["Major Genre"]\n')
    res = r.invoke(app, ["generate", "--catalog", "movies", "--schema", str(bad), "movie00001"])
    assert res.exit_code != 0 and "Studio" in str(res.exception)
    out = tmp_path / "click"
    res = r.invoke(app, ["generate", "dataset", "--catalog", "movies", "--out", str(out),
                         "--n-queries", "400", "--n-broad-test", "50"])
    assert res.exit_code == 0, res.output
    for split in ("train", "val", "test", "broad_test"):
        assert (out / f"{split}.queries.tsv").exists() and (out / f"{split}.qrels.txt").exists()


def test_generated_queries_are_never_a_letter_or_a_stop_word():
    # issue 24 item 14: `generate --catalog debian --intent broad --n 3 0ad` returned "r"
    from limelight.analysis import stopword_list

    stop = stopword_list("en")
    r = CliRunner().invoke(app, ["generate", "--catalog", "debian", "--intent", "broad", "--n", "3",
                                 "--json", "0ad"])
    assert r.exit_code == 0, r.output
    got = [__import__("json").loads(x)["query"] for x in r.output.strip().splitlines()]
    assert len(got) == 3 and all(len(q) >= 2 and q not in stop for q in got), got
    from limelight.querygen.weaklabel import acceptable_query

    # over many real entities and both intents (the prefix cut and misspelling variations
    # are what used to leave one letter)
    deb = load_catalog("debian")
    lab = WeakLabelingUn("debian").fit(deb)
    idx = np.random.default_rng(3).choice(len(deb), 1500, replace=False)
    for intent in ("narrow", "broad"):
        _, _, qs = lab.generate(idx, intent, seed=7)
        assert len(qs) > 1000 and all(acceptable_query(q) for q in qs.tolist())
    assert not acceptable_query("r") and not acceptable_query("the") and acceptable_query("vi")
