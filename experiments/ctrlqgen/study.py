"""The CtrlQGen study's state: its configuration, the sub-jobs' keys and folders, restoring
committed results, and the helpers the stages share (``pipeline.py`` runs the stages; its
docstring describes the study).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VERSION = 1  # bump when a stage's computation changes (every key changes with it)
# the files of stage weaklabels that later stages read, besides heldout.npy and eprime.npy (all
# committed under results/weaklabels/, so ``Study.restore`` copies them)
WEAKLABEL_FILES = ("click_train.parquet", "click_val.parquet", "click_test.parquet",
                   "click_broad_test.parquet", "gen_ctrlqgen.parquet", "gen_qgen.parquet")
STAGES = ("weaklabels", "generator", "generate", "finetune", "exposure", "tests", "h2", "validity")
SET_SOURCES = {"QGen": "qgen", "InPars": "inpars", "CtrlQGen_narrow": "ctrl_narrow",
               "CtrlQGen_broad": "ctrl_broad"}
GEN_OF_SET = {"qgen": "qgen", "ctrl_narrow": "ctrlqgen", "ctrl_broad": "ctrlqgen", "inpars": None}
# the main generators: kind, entity text (None: the kind's default), training pairs
# (weaklabels/gen_<pairs>.parquet) and the pair ``source`` kept (None: every pair)
MAIN_GENERATORS = {"ctrlqgen": {"kind": "ctrlqgen", "serialize": None, "pairs": "ctrlqgen", "source": None},
                   "qgen": {"kind": "qgen", "serialize": None, "pairs": "qgen", "source": None}}

# ---- the Table 4 ablation (PLAN.md, amendment 2026-11-25) ----------------------------------------
ABLATION_STAGE = "ablation"
ABLATION_SEED = 0  # one bi-encoder seed per ablation set; the reference rows use their seed-0 models
ABLATION_GENERATORS = {  # s(e) = serialize; pairs "ctrlqgen" source "ip": the WeakLabeling-IP pairs
    "qgen_ser": {"kind": "qgen", "serialize": True, "pairs": "qgen", "source": None},
    "intent_ip": {"kind": "ctrlqgen", "serialize": False, "pairs": "ctrlqgen", "source": "ip"},
    "intent_ipun": {"kind": "ctrlqgen", "serialize": False, "pairs": "ctrlqgen", "source": None},
    "ctrl_ip": {"kind": "ctrlqgen", "serialize": True, "pairs": "ctrlqgen", "source": "ip"},
}
# Table 4 rows: the generator each needs (None: the main study's) and the bi-encoder set of its
# narrow columns (Click test) and of its broad columns (broad test)
ABLATION_ROWS = {
    "QGen": (None, "QGen", "QGen"),
    "+(1)": ("qgen_ser", "qgen_ser", "qgen_ser"),
    "+(2a,3)": ("intent_ip", "intent_ip_narrow", "intent_ip_broad"),
    "+(2a,2b,3)": ("intent_ipun", "intent_ipun_narrow", "intent_ipun_broad"),
    "+(1,2a,3)": ("ctrl_ip", "ctrl_ip_narrow", "ctrl_ip_broad"),
    "+(1,2a,2b,3)": (None, "CtrlQGen_narrow", "CtrlQGen_broad"),
}
ABLATION_REFERENCE = "QGen"
# the verdicts' extra pairs (a: the component added), tested like the rows against QGen
ABLATION_EXTRA_PAIRS = [("+(1,2a,2b,3)", "+(2a,2b,3)"), ("+(2a,2b,3)", "+(2a,3)"),
                        ("+(1,2a,2b,3)", "+(1,2a,3)")]


def ablation_sets_of(gen: str) -> list[str]:
    """The sets an ablation generator gives: one (QGen kind, no intent) or a narrow and a broad
    set (the intent-aware kinds)."""
    if ABLATION_GENERATORS[gen]["kind"] == "qgen":
        return [gen]
    return [f"{gen}_narrow", f"{gen}_broad"]


ABLATION_SETS = {s: g for g in ABLATION_GENERATORS for s in ablation_sets_of(g)}


def ablation_model(set_name: str) -> str:
    """The ablation's bi-encoder of a set: its seed-``ABLATION_SEED`` model."""
    return f"{set_name}-s{ABLATION_SEED}"


def generator_of_set(set_name: str) -> str | None:
    """The generator a generated set comes from (None: InPars, the backbone few-shot)."""
    if set_name in GEN_OF_SET:
        return GEN_OF_SET[set_name]
    if set_name in ABLATION_SETS:
        return ABLATION_SETS[set_name]
    from limelight.errors import LimelightError

    raise LimelightError(f"unknown generated set {set_name!r}")


def generator_spec(name: str) -> dict:
    """Kind, entity text and training pairs of a main or ablation generator."""
    spec = MAIN_GENERATORS.get(name) or ABLATION_GENERATORS.get(name)
    if spec is None:
        from limelight.errors import LimelightError

        raise LimelightError(f"unknown generator {name!r} (main: {', '.join(MAIN_GENERATORS)}; "
                             f"ablation: {', '.join(ABLATION_GENERATORS)})")
    return spec


def set_intent(set_name: str) -> tuple[str, str | None]:
    """(intent asked of the generator, intent label stored with the set): broad for a
    ``*_broad`` set, narrow otherwise; the label only for intent-aware (ctrlqgen) generators."""
    intent = "broad" if set_name.endswith("_broad") else "narrow"
    g = generator_of_set(set_name)
    return intent, intent if g is not None and generator_spec(g)["kind"] == "ctrlqgen" else None


class Stopped(Exception):
    """The time budget ran out; the stage saved its state and a rerun continues it."""


def log(*a) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def read_config(path: str | os.PathLike) -> dict:
    """The study settings: a TOML file such as experiments/ctrlqgen/debian.toml (or the same
    structure as JSON, ``.json``)."""
    from limelight.errors import LimelightError

    p = Path(path)
    if not p.exists():
        raise LimelightError(f"{path}: no such config file")
    try:
        if p.suffix == ".json":
            return json.loads(p.read_text(encoding="utf-8"))
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise LimelightError(f"{path}: invalid config ({str(e).splitlines()[0]})") from None


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    from limelight._io import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False, compression="zstd")


def write_json(obj, path: Path) -> None:
    from limelight._io import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, default=_jsonable) + "\n")


def save_npy(a: np.ndarray, path: Path) -> None:
    from limelight._io import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, a)


def copy_file(src: Path, dst: Path) -> None:
    import shutil

    from limelight._io import atomic_path

    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def _jsonable(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


# ---- the split and E' (stage weaklabels; recomputed by ``Study.restore``) ----------------------


def heldout_of(cfg: dict, n: int) -> np.ndarray:
    """The held-out entities (sorted indices) of a catalog of ``n`` entities: their queries form
    the test sets and they are never in a training set (``split.heldout_fraction``, ``split.seed``)."""
    from limelight.querygen.weaklabel import heldout_entities

    return heldout_entities(n, cfg["split"]["heldout_fraction"], cfg["split"]["seed"])


def eprime_of(cfg: dict, n: int, held: np.ndarray) -> np.ndarray:
    """E': ``weaklabels.n_eprime`` entities outside the held-out ones, in a seeded random order
    (the generated sets take the first ``generate.n_generate``)."""
    pool = np.setdiff1d(np.arange(n), held)
    wl = cfg["weaklabels"]
    return np.random.default_rng(wl["seed"] + 7).choice(pool, wl["n_eprime"], replace=False)


# ---- top-k files -------------------------------------------------------------------------------


def save_npz(arrays: dict[str, np.ndarray], path: Path) -> None:
    """``np.savez_compressed`` written atomically (to a file object: no ``.npz`` appended)."""
    from limelight._io import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)


TOPK_META = "__meta__"  # the committed top-k's JSON entry: encoding, dtypes, exposure key


def write_committed_topk(top: dict[str, np.ndarray], n_docs: int, key: str, path: Path) -> None:
    """The top-k of an exposure, committed with the results (``exposure/<model>.topk.npz``):
    ids + 1 (-1, no hit, becomes 0) in the smallest unsigned type that holds ``n_docs`` + 1
    (uint16 up to 65,534 entities: Debian's 63,666), compressed; ``read_committed_topk`` gives the
    arrays back exactly (values and dtypes). ``key``: the exposure's, checked on restore."""
    code = np.min_scalar_type(n_docs + 1)
    for s, a in top.items():
        if a.size and (a.min() < -1 or a.max() >= n_docs):
            raise ValueError(f"top-k {s} holds ids outside [-1, {n_docs})")
    meta = {"encoding": "id+1", "code": code.str, "key": key, "n_docs": n_docs,
            "dtypes": {s: a.dtype.str for s, a in top.items()}}
    arrays = {s: (a.astype(np.int64) + 1).astype(code) for s, a in top.items()}
    save_npz({**arrays, TOPK_META: np.asarray(json.dumps(meta, sort_keys=True))}, path)


def read_committed_topk(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    """(the arrays ``write_committed_topk`` wrote, its metadata)."""
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z[TOPK_META]))
        top = {s: (z[s].astype(np.int64) - 1).astype(np.dtype(meta["dtypes"][s]))
               for s in z.files if s != TOPK_META}
    return top, meta


class Study:
    """One configured study: the catalog, the settings and the stage folders."""

    def __init__(self, config: dict, budget_s: float | None = None, root: str | os.PathLike = "."):
        self.cfg = config
        self.root = Path(root)
        self.work = self.root / config.get("work", ".cache/ctrlqgen-study/default")
        self.results = self.root / config.get("results", "experiments/ctrlqgen/results/default")
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        self.stop_hook = None  # tests: a predicate on (stage, step) that interrupts a stage
        self._coll = None
        self._texts = None

    # ---- budget ---------------------------------------------------------------------------
    def out_of_time(self, stage: str = "", step: int = 0) -> bool:
        if self.stop_hook is not None and self.stop_hook(stage, step):
            return True
        return self.deadline is not None and time.monotonic() > self.deadline

    def stopper(self, stage: str):
        return lambda step: self.out_of_time(stage, step)

    # ---- data -----------------------------------------------------------------------------
    @property
    def threads(self) -> int:
        return int(self.cfg.get("threads", 2))

    @property
    def schema(self):
        from limelight.querygen.serialize import load_schema

        return load_schema(self.cfg.get("schema", self.cfg["catalog"]))

    @property
    def collection(self):
        """The catalog (or its seeded ``catalog_subset``), checked against the schema."""
        if self._coll is None:
            from limelight.data import load_catalog
            from limelight.data.collection import Collection
            from limelight.data.ids import IdMap

            full = load_catalog(self.cfg["catalog"])
            self.schema.check_collection(full)
            n = self.cfg.get("catalog_subset")
            if n and n < len(full):
                sel = np.sort(np.random.default_rng(0).choice(len(full), int(n), replace=False))
                full = Collection(IdMap(full.ids.strings[sel], kind="document"), full.texts[sel],
                                  {k: v[sel] for k, v in full.fields.items()},
                                  f"{full.name}-{n}", full.text_fields)
            self._coll = full
        return self._coll

    @property
    def texts(self) -> np.ndarray:
        """s(e) of every entity: what the generators read and the bi-encoders index."""
        if self._texts is None:
            from limelight.querygen.serialize import serialize_collection

            self._texts = serialize_collection(self.collection, self.schema)
        return self._texts

    def text_collection(self):
        from limelight.data.collection import Collection

        c = self.collection
        return Collection(c.ids, self.texts, c.fields, f"{c.name}-serialized", ("serialized",))

    # ---- keys and folders -----------------------------------------------------------------
    def key(self, stage: str, name: str = "") -> str:
        """The hash of a sub-job's settings and of its inputs' keys."""
        c = self.cfg
        base = {"v": VERSION, "catalog": c["catalog"], "subset": c.get("catalog_subset"),
                "schema": c.get("schema", c["catalog"])}
        if stage == "weaklabels":
            return digest({**base, "split": c["split"], "click": c["click"], "wl": c["weaklabels"]})
        wl = self.key("weaklabels")
        if stage == "generator":
            if name in ABLATION_GENERATORS:  # new names only: the main keys stay as they were
                return digest({"wl": wl, "gen": c["generator"], "name": name,
                               "ablation": ABLATION_GENERATORS[name]})
            return digest({"wl": wl, "gen": c["generator"], "name": name})
        if stage == "generate":
            g = generator_of_set(name)
            up = self.key("generator", g) if g else digest({"wl": wl, "backbone": c["generator"]})
            skip = ("sets", "n_generate")  # more entities extend a set (chunks are per index)
            return digest({"up": up, "gen": {k: v for k, v in c["generate"].items() if k not in skip},
                           "name": name, "max_in": c["generator"]["max_input_tokens"],
                           "max_new": c["generator"]["max_new_tokens"]})
        if stage == "finetune":
            set_name, seed = name.rsplit("-s", 1)
            return digest({"inputs": self.set_inputs(set_name), "bi": self._bi_settings(),
                           "set": set_name, "seed": int(seed)})
        if stage == "exposure":
            up = wl if name in ("BM25", "zero-shot") else self.key("finetune", name)
            return digest({"up": up, "wl": wl, "exp": c["exposure"], "name": name})
        if stage == "tests":
            return digest({"exp": [self.key("exposure", m) for m in self.all_models()],
                           "tests": c["tests"]})
        if stage == "h2":
            return digest({"exp": [self.key("exposure", f"{m}-s{s}") for m in c["h2"]["models"]
                                   for s in self.seeds], "gen": self.key("generator", "ctrlqgen"),
                           "h2": c["h2"], "tests": c["tests"]})
        if stage == "validity":
            return digest({"n": self.key("generate", "ctrl_narrow"),
                           "b": self.key("generate", "ctrl_broad")})
        if stage == ABLATION_STAGE:
            return digest({"exp": [self.key("exposure", m) for m in self.ablation_row_models()],
                           "rows": list(self.ablation_rows()), "tests": c["tests"],
                           "ablation": c[ABLATION_STAGE]})
        raise ValueError(stage)

    def _bi_settings(self) -> dict:
        return {k: v for k, v in self.cfg["biencoder"].items() if k not in ("sets", "seeds")}

    def set_inputs(self, set_name: str) -> list[str]:
        if set_name == "Click":
            return [self.key("weaklabels")]
        if set_name == "CtrlQGen_both":  # its halves of E' depend on how many were generated
            return [self.key("generate", "ctrl_narrow"), self.key("generate", "ctrl_broad"),
                    str(self.cfg["generate"].get("n_generate"))]
        if set_name in ABLATION_SETS:  # an ablation bi-encoder trains on its generated set
            return [self.key("generate", set_name)]
        return [self.key("generate", SET_SOURCES[set_name])]

    def dir(self, stage: str, name: str = "") -> Path:
        label = f"{name}-{self.key(stage, name)}" if name else self.key(stage, name)
        return self.work / stage / label

    def done(self, stage: str, name: str = "") -> dict | None:
        p = self.dir(stage, name) / "done.json"
        return json.loads(p.read_text()) if p.exists() else None

    def mark_done(self, stage: str, name: str, info: dict, t0: float) -> dict:
        d = self.dir(stage, name)
        spent = self._spent(d) + time.perf_counter() - t0
        info = {"stage": stage, "name": name, "key": self.key(stage, name),
                "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": round(spent, 1),
                "load_end": load_avg(), **info}
        write_json(info, d / "done.json")
        man_p = self.results / "manifest.json"
        man = json.loads(man_p.read_text()) if man_p.exists() else {}
        man[f"{stage}/{name}" if name else stage] = {k: info[k] for k in
                                                     ("key", "finished", "seconds", "load_end")}
        write_json(dict(sorted(man.items())), man_p)
        return info

    def _spent(self, d: Path) -> float:
        p = d / "spent.json"
        return json.loads(p.read_text())["seconds"] if p.exists() else 0.0

    def add_spent(self, d: Path, t0: float) -> None:
        write_json({"seconds": self._spent(d) + time.perf_counter() - t0}, d / "spent.json")

    # ---- models ---------------------------------------------------------------------------
    @property
    def seeds(self) -> list[int]:
        return [int(s) for s in self.cfg["biencoder"]["seeds"]]

    def trained_models(self) -> list[str]:
        return [f"{s}-s{seed}" for s in self.cfg["biencoder"]["sets"] for seed in self.seeds]

    def all_models(self) -> list[str]:
        return list(self.cfg["exposure"].get("baselines", [])) + self.trained_models()

    # ---- the Table 4 ablation (absent ``[ablation]``: none of it) -----------------------------
    @property
    def has_ablation(self) -> bool:
        return bool(self.cfg.get(ABLATION_STAGE))

    def ablation_generators(self) -> list[str]:
        """The configured ablation generators (``ablation.generators``), checked."""
        if not self.has_ablation:
            return []
        gens = list(self.cfg[ABLATION_STAGE].get("generators", []))
        bad = [g for g in gens if g not in ABLATION_GENERATORS]
        if bad or not gens:
            from limelight.errors import LimelightError

            raise LimelightError(f"ablation.generators must name some of "
                                 f"{', '.join(ABLATION_GENERATORS)}; got {bad or gens!r}")
        return gens

    def ablation_sets(self) -> list[str]:
        return [s for g in self.ablation_generators() for s in ablation_sets_of(g)]

    def ablation_models(self) -> list[str]:
        """The ablation bi-encoders: one seed-0 model per ablation set."""
        return [ablation_model(s) for s in self.ablation_sets()]

    def ablation_rows(self) -> dict[str, tuple[str, str]]:
        """Table 4 rows of this run (the reference rows and the configured generators' rows):
        row → (model of the narrow columns, model of the broad columns)."""
        gens = set(self.ablation_generators())
        return {row: (ablation_model(n), ablation_model(b))
                for row, (g, n, b) in ABLATION_ROWS.items() if g is None or g in gens}

    def ablation_row_models(self) -> list[str]:
        """Every model the ablation comparisons read (reference rows' main models included)."""
        return sorted({m for ms in self.ablation_rows().values() for m in ms})

    # ---- sub-jobs, and restoring them from the committed results (fresh clones) ---------------
    def jobs(self) -> list[tuple[str, str]]:
        """Every sub-job (stage, name) of this config, in the order of the stages."""
        c = self.cfg
        jobs = [("weaklabels", "")]
        jobs += [("generator", g) for g in MAIN_GENERATORS]
        jobs += [("generate", s) for s in c["generate"]["sets"]]
        jobs += [("finetune", m) for m in self.trained_models()]
        jobs += [("exposure", m) for m in self.all_models()]
        jobs += [("tests", ""), ("h2", ""), ("validity", "")]
        if self.has_ablation:
            jobs += [("generator", g) for g in self.ablation_generators()]
            jobs += [("generate", s) for s in self.ablation_sets()]
            jobs += [("finetune", m) for m in self.ablation_models()]
            jobs += [("exposure", m) for m in self.ablation_models()]
            jobs += [(ABLATION_STAGE, "")]
        return jobs

    def h2_models(self) -> set[str]:
        """The bi-encoders H2 reads (weights and catalog embeddings, not only the top-k)."""
        return {f"{m}-s{s}" for m in self.cfg["h2"]["models"] for s in self.seeds}

    def restore(self) -> list[tuple[str, str]]:
        """Rebuild in ``work`` the sub-jobs a fresh clone lacks from the committed results.

        A sub-job without ``done.json`` whose manifest key equals its current key (a changed
        config never restores) gets its work state back and a ``done.json`` with
        ``"restored": true`` (the committed info kept) when the committed files suffice:
        weaklabels (``heldout.npy`` and ``eprime.npy`` recomputed, checked against the committed
        split; the parquet files copied); a generated set (``queries.parquet``; complete for
        ``generate.n_generate``); an exposure with a committed ``<model>.topk.npz`` (written by
        this version); a bi-encoder (weights never committed: ``"weights": "not kept"``) only once
        its exposure is done and H2 (which reads the weights and embeddings of its models) is
        done; a generator once every configured set it makes is done (and H2, for ctrlqgen); the
        comparisons (tests, h2, validity, ablation) when their result json is committed. Returns
        the restored sub-jobs.
        """
        man_p = self.results / "manifest.json"
        if not man_p.exists():
            return []
        man = json.loads(man_p.read_text())
        jobs = self.jobs()
        restored: list[tuple[str, str]] = []

        def ready(stage: str, name: str = "") -> bool:
            return (stage, name) in restored or self.done(stage, name) is not None

        def entry(stage: str, name: str = "") -> dict | None:
            """The manifest entry of a sub-job not done here whose key is the current one."""
            if (stage, name) not in jobs or self.done(stage, name):
                return None
            e = man.get(f"{stage}/{name}" if name else stage)
            return e if e and e.get("key") == self.key(stage, name) else None

        def committed(path: Path, e: dict) -> dict | None:
            """A committed json of the sub-job (None: absent, or of another key)."""
            if not path.exists():
                return None
            info = json.loads(path.read_text())
            return info if info.get("key", e["key"]) == e["key"] else None

        def mark(stage: str, name: str, e: dict, info: dict, src: Path, **extra) -> None:
            keep = {"stage": stage, "name": name, **{k: e[k] for k in
                                                      ("key", "finished", "seconds", "load_end") if k in e}}
            write_json({**keep, **info, "key": e["key"], "restored": True,
                        "restored_from": str(src), **extra},
                       self.dir(stage, name) / "done.json")
            restored.append((stage, name))

        # the comparisons: their committed json (only its top-level values, not the results)
        terminal = {"tests": ["tests.json"], "h2": ["h2.json", "h2_queries.parquet"],
                    "validity": ["validity.json"], ABLATION_STAGE: ["ablation.json"]}
        for stage, files in terminal.items():
            e = entry(stage)
            if e and all((self.results / f).exists() for f in files):
                info = committed(self.results / files[0], e)
                if info is not None:
                    mark(stage, "", e, {k: v for k, v in info.items() if not isinstance(v, dict)},
                         self.results / files[0])
        wl_dir = self.results / "weaklabels"
        e = entry("weaklabels")
        info = committed(wl_dir / "summary.json", e) if e else None
        if info is not None and all((wl_dir / f).exists() for f in WEAKLABEL_FILES):
            self._restore_weaklabels(wl_dir, info)
            mark("weaklabels", "", e, info, wl_dir / "summary.json")
        n_gen = self.cfg["generate"].get("n_generate")
        sets = list(self.cfg["generate"]["sets"]) + self.ablation_sets()
        for s in sets:
            e = entry("generate", s)
            src = self.results / "queries" / f"{s}.parquet"
            info = committed(src.with_suffix(".json"), e) if e and src.exists() else None
            if info is not None and info["n_entities"] >= (n_gen or info["n_entities"]):
                self._restore_set(s, src, info["n_entities"])
                mark("generate", s, e, info, src)
        h2_done = ready("h2")
        h2_models = self.h2_models()
        models = self.all_models() + self.ablation_models()
        for m in models:
            e = entry("exposure", m)
            src = self.results / "exposure" / f"{m}.topk.npz"
            if not e or not src.exists() or (m in h2_models and not h2_done):
                continue
            info = committed(self.results / "exposure" / f"{m}.json", e)
            top, meta = read_committed_topk(src) if info is not None else ({}, {})
            if meta.get("key") == e["key"]:
                save_npz(top, self.dir("exposure", m) / "topk.npz")
                mark("exposure", m, e, info, src, embeddings="not kept")
        for m in self.trained_models() + self.ablation_models():
            e = entry("finetune", m)
            if e and ready("exposure", m) and (m not in h2_models or h2_done):
                src = self.results / "finetune" / f"{m}.json"
                info = committed(src, e)
                if info is not None:
                    mark("finetune", m, e, info, src, weights="not kept")
        for g in list(MAIN_GENERATORS) + self.ablation_generators():
            e = entry("generator", g)
            readers = all(ready("generate", s) for s in sets if generator_of_set(s) == g)
            if e and readers and (g != "ctrlqgen" or h2_done):
                src = self.results / "generator" / f"{g}.json"
                info = committed(src, e)
                if info is not None:
                    mark("generator", g, e, info, src, weights="not kept")
        self._check_restored_weights(self.trained_models() + self.ablation_models())
        return restored

    def _check_restored_weights(self, models: list[str]) -> None:
        """A bi-encoder restored without its weights must never be needed: its exposure is done
        (the restore rule); otherwise a one-line error naming it (never a silent load)."""
        from limelight.errors import LimelightError

        for m in models:
            d = self.done("finetune", m)
            if d and d.get("restored") and not self.done("exposure", m):
                raise LimelightError(f"bi-encoder {m} was restored without its weights but its "
                                     f"exposure must be computed again: delete "
                                     f"{self.dir('finetune', m)} to train it again")

    def _restore_weaklabels(self, src: Path, info: dict) -> None:
        """heldout.npy and eprime.npy recomputed (``heldout_of``, ``eprime_of``, as stage
        weaklabels), checked against the committed summary and Click split; the parquet copied."""
        from limelight.errors import LimelightError

        n = int(info["n_entities"])
        held = heldout_of(self.cfg, n)
        eprime = eprime_of(self.cfg, n, held)
        click = {f: pd.read_parquet(src / f, columns=["entity"])["entity"].to_numpy()
                 for f in WEAKLABEL_FILES if f.startswith("click_")}
        test_side = np.concatenate([click["click_test.parquet"], click["click_broad_test.parquet"]])
        train_side = np.concatenate([click["click_train.parquet"], click["click_val.parquet"]])
        ok = (len(held) == info["n_heldout"] and n - len(held) == info["n_pool"]
              and len(eprime) == info["n_eprime"] and np.isin(test_side, held).all()
              and not np.isin(train_side, held).any() and not np.isin(eprime, held).any())
        if not ok:
            raise LimelightError(f"the split recomputed for {self.results} does not match its "
                                 f"committed weaklabels (summary.json, Click sets): not restored")
        d = self.dir("weaklabels")
        save_npy(held, d / "heldout.npy")
        save_npy(eprime, d / "eprime.npy")
        for f in WEAKLABEL_FILES:
            copy_file(src / f, d / f)

    def _restore_set(self, set_name: str, src: Path, n_entities: int) -> None:
        """queries.parquet of a generated set (its entities checked against E', when known)."""
        from limelight.errors import LimelightError

        ep = self.dir("weaklabels") / "eprime.npy"
        if ep.exists():
            ents = pd.read_parquet(src, columns=["entity"])["entity"].to_numpy()
            if not np.isin(ents, np.load(ep)[:n_entities]).all():
                raise LimelightError(f"committed set {src} has entities outside E' "
                                     f"(weaklabels/eprime.npy): not restored")
        copy_file(src, self.dir("generate", set_name) / "queries.parquet")
