"""A tiny real audit for the portal's comparison, DP and per-role schema tests (issue 54): adi
(82 documents) under two BM25 systems at depth 10, over a generated AOL-layout log (searcher and
time columns: the shared log has neither) in which each adi query is issued by 1, 3 or 40
distinct searchers, and one planted search (the words of a document's title in reverse order, so
that it ranks that document first) is typed by one searcher alone, 8 times. Owners from a TSV: odd documents
``a``, even ones ``b``."""

from __future__ import annotations

import json
from pathlib import Path

LONELY_SEARCHER = "lonely"
K = 2


def build(root: Path) -> dict:
    """The audit, its log and owners under ``root`` (built once: skipped when there)."""
    from limelight.audit import AuditDir
    from limelight.data import load_dataset
    from limelight.data.loaders import load_query_log
    from limelight.exposure.compute import compute_exposure
    from limelight.retrieval.index_dir import build_index, open_retriever

    ad = AuditDir(root / "audit")
    log_path, owners = root / "log.tsv", root / "owners.tsv"
    ds = load_dataset("adi")
    ids = ds.collection.ids.strings.tolist()
    target = ids[7]  # an odd row: owner a's
    words = [w for w in str(ds.collection.texts[7]).lower().split() if w.isalpha()][:8]
    lonely = " ".join(reversed(words))  # its words, in an order no page shows
    info = {"audit": ad.path, "log": log_path, "owners": owners, "lonely": lonely, "target": target}
    if ad.exists():
        return info
    root.mkdir(parents=True, exist_ok=True)
    lines = ["AnonID\tQuery\tQueryTime"]
    for i, text in enumerate(ds.queries.texts.tolist()):
        for s in range((1, 3, 40)[i % 3]):
            lines.append(f"s{i}-{s}\t{text}\t2006-03-0{1 + s % 2} 10:{s % 60:02d}:00")
    lines += [f"{LONELY_SEARCHER}\t{lonely}\t2006-03-01 11:{m:02d}:00" for m in range(8)]
    log_path.write_text("\n".join(lines) + "\n")
    owners.write_text("".join(f"{'a' if i % 2 else 'b'}\t{d}\n" for i, d in enumerate(ids)))
    log = load_query_log(log_path)
    build_index(ds.collection, ad.index_dir)
    systems = [{"name": "bm25", "kind": "bm25", "k1": 0.9, "b": 0.4},
               {"name": "bm25-classic", "kind": "bm25", "k1": 1.2, "b": 0.75}]
    for s in systems:
        compute_exposure(open_retriever(ad.index_dir, "bm25", k1=s["k1"], b=s["b"]), log,
                         ad.store_dir(s["name"]), depth=10)
    ad.manifest_path.write_text(json.dumps({
        "format": "limelight-audit/1", "name": "adi-portal", "complete": True,
        "collection": {"source": "adi", "name": "adi", "n_docs": len(ds.collection)},
        "queries": {"source": str(log_path), "n_queries": len(log)}, "depth": 10, "cutoffs": [10],
        "systems": systems}))
    return info


def portal(info: dict, db: Path, k: int = K, dp=None, compare: bool = True):
    """``(app, service, accounts, tokens)``: the portal over the audit (owners a and b: alice and
    bob; root the admin), with the DP release ``dp`` and the same audit as ``--compare``."""
    from limelight.service.accounts import Accounts
    from limelight.service.app import create_app
    from limelight.service.core import AuditService
    from limelight.service.policy import Ownership, Policy
    from limelight.service.portal import PortalConfig, install

    service = AuditService(info["audit"])
    other = AuditService(info["audit"]) if compare else None
    accounts = Accounts(f"sqlite:///{db}")
    accounts.add_user("alice", "owner", "a")
    accounts.add_user("bob", "owner", "b")
    accounts.add_user("root", "admin")
    tokens = {n: {"Authorization": f"Bearer {accounts.issue_token(n)[0]}"} for n in ("alice", "bob", "root")}
    tokens["anonymous"] = {}
    policy = Policy(Ownership.from_spec(str(info["owners"]), service.doc_ids, service.docs.fields), k, dp=dp)
    app = install(create_app(service, max_body=256 * 1024, compare=other), service, PortalConfig(accounts, policy))
    return app, service, accounts, tokens
