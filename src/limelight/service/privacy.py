"""Searchers' privacy: which log queries may reach a content owner.

The EQI paper warns that exposing queries touch privacy ("rare queries can contain personally
identifying information", §7.4), and Search Console never shows a query issued by few users.
Here a query reaches an owner only when

- it was issued at least ``k`` times (the stored weight o_q: the log's count of the text), or by
  at least ``k`` distinct searchers when the query set carries such a count (a per-query
  ``n_searchers`` field); and
- its text carries none of the personal data of :data:`PERSONAL_DATA`, whatever its count.

Hidden queries still count in every total; an answer that lists queries says how many it left
out and why (:meth:`QueryScreen.summary`).

Personal data is found by the documented patterns below, not by a trained detector: Presidio
needs a spaCy model that is not a package on PyPI, and scrubadub has had no release since 2021.
The patterns are deliberately broad (a run of seven digits hides "1999 2000 2001" too): a query
wrongly hidden costs an owner one row; a query wrongly shown costs a searcher their privacy.
They run as RE2 expressions over the whole query set at once (Arrow), once per query set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: what each pattern finds (the answer's words) -> an RE2 expression, matched case-insensitively
#: anywhere in the query text
PERSONAL_DATA: dict[str, str] = {
    "an e-mail address": r"[a-z0-9._%+\-]+@[a-z0-9\-]+(\.[a-z0-9\-]+)*\.[a-z]{2,}",
    "a phone number": r"(\+?[0-9]{1,4}[ .\-]?)?\(?[0-9]{2,4}\)?[ .\-]?[0-9]{3,4}[ .\-]?[0-9]{3,4}",
    "a card or id number": r"[0-9]{7,}|([0-9]{4}[ \-]){3}[0-9]{1,4}|[0-9]{3}-[0-9]{2}-[0-9]{4}",
    "a URL with an id": r"(https?://|www\.)[^ ]*([?=&#]|[0-9]{3,})",
}
PERSONAL_WORDS = "an e-mail address, a phone, card or id number, a URL with an id"


def personal_data(texts) -> np.ndarray:
    """For each text (a sequence of str or an Arrow string array), whether it may carry personal
    data (any pattern of :data:`PERSONAL_DATA`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = texts if isinstance(texts, pa.Array | pa.ChunkedArray) else pa.array(list(texts), pa.string())
    lower = pc.utf8_lower(arr)
    hit = np.zeros(len(arr), dtype=bool)
    for pattern in PERSONAL_DATA.values():
        hit |= pc.match_substring_regex(lower, pattern).to_numpy(zero_copy_only=False).astype(bool)
    return hit


@dataclass(frozen=True, eq=False)
class QueryScreen:
    """Which queries of one query set (by code) an owner may not see, and why."""

    k: int
    basis: str  # "times issued" or "distinct searchers"
    few: np.ndarray  # bool per query: issued fewer than k times (or by fewer than k searchers)
    personal: np.ndarray  # bool per query: may carry personal data (whatever its count)
    #: with a DP release (``limelight.service.dprelease``): bool per query, not released
    unreleased: np.ndarray | None = None
    #: with a DP release: per query, the release's noisy count of searchers (0: not released)
    noisy: np.ndarray | None = None
    dp: dict | None = None  # with a DP release: epsilon, delta, cap, threshold, statement

    @property
    def hidden(self) -> np.ndarray:
        """Bool per query: not shown to an owner."""
        if self.unreleased is None:
            return self.few | self.personal
        return self.few | self.personal | self.unreleased

    def summary(self, codes: np.ndarray) -> dict:
        """How many of the queries ``codes`` (a document's list, say) are hidden and why: issued
        too rarely, or carrying personal data (counted once, under the first reason that holds),
        with the sentence the pages show."""
        codes = np.asarray(codes, dtype=np.int64)
        few = int(self.few[codes].sum()) if len(codes) else 0
        personal = int((self.personal[codes] & ~self.few[codes]).sum()) if len(codes) else 0
        out = {"k": self.k, "basis": self.basis, "hidden": few + personal, "fewer_than_k": few,
               "personal_data": personal, "not_released": 0, "dp": self.dp}
        if self.unreleased is not None and len(codes):
            out["not_released"] = int((self.unreleased[codes] & ~self.few[codes] & ~self.personal[codes]).sum())
            out["hidden"] += out["not_released"]
        out["note"] = self.sentence(few, personal, out["not_released"])
        return out

    @property
    def dp_terms(self) -> str:
        """The DP release's epsilon and delta, as the sentences state them."""
        return f"epsilon = {self.dp['epsilon']:g}, delta = {self.dp['delta']:.2g}" if self.dp else ""

    def sentence(self, few: int, personal: int, unreleased: int = 0) -> str:
        """The hidden rows in words (they still count in every total)."""
        if few + personal + unreleased == 0:
            what = "issued by" if self.basis == "distinct searchers" else "issued"
            unit = "searchers" if self.basis == "distinct searchers" else "times"
            dp = f" and is in the differentially private release ({self.dp_terms})" if self.dp else ""
            return (f"Every search listed was {what} at least {self.k:,} {unit} ({self.basis}), "
                    f"carries no personal data{dp}.")
        parts = []
        if few:
            unit = "searchers" if self.basis == "distinct searchers" else "times"
            parts.append(f"{few:,} issued by fewer than {self.k:,} {unit}" if unit == "searchers"
                         else f"{few:,} issued fewer than {self.k:,} {unit}")
        if personal:
            parts.append(f"{personal:,} that may carry personal data ({PERSONAL_WORDS})")
        if unreleased:
            parts.append(f"{unreleased:,} that the differentially private release ({self.dp_terms}) does not list")
        n = few + personal + unreleased
        return (f"{n:,} {'search is' if n == 1 else 'searches are'} not listed, to protect the "
                f"searchers' privacy: {' and '.join(parts)}. They still count in every total.")


def screen_queries(texts, weights: np.ndarray, k: int, searchers: np.ndarray | None = None,
                   release=None) -> QueryScreen:
    """The screen of a query set: ``weights`` o_q (times issued) or, when given, ``searchers``
    (distinct searchers per query) against ``k``; ``texts`` for personal data; with ``release``
    (a ``DPRelease`` of the log), only the queries it released pass, and their noisy counts are
    kept for the lists that rank by them."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if searchers is not None:
        few, basis = np.asarray(searchers, dtype=np.float64) < k, "distinct searchers"
    else:
        few, basis = np.asarray(weights, dtype=np.float64) < k, "times issued"
    if release is None:
        return QueryScreen(k, basis, few, personal_data(texts))
    counts = release.counts
    noisy = np.asarray([counts.get(str(t), 0) for t in np.asarray(texts, dtype=object).tolist()], dtype=np.int64)
    return QueryScreen(k, basis, few, personal_data(texts), noisy <= 0, noisy, release.describe())
