"""The one home of the words, symbols and formulas that the report and the web app show.

Pages speak in words (``label``); the symbol and the formula of each term live here, shown on the
glossary (``/glossary`` in ``limelight serve``, an appendix of the HTML report) and linked from
every place a term appears (``anchor``). Field names of tables (``gini_retrieved_only``) map to
their words through :data:`FIELD_LABELS`; the browsing models a page offers are
:data:`BROWSING_CHOICES`, each with one sentence. Plain data, no dependencies: the report and the
service both read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """One glossary entry.

    ``key``: stable identifier (the anchor is ``glossary-<key>``); ``label``: the words a page
    shows; ``symbol``: the notation of the papers (may be empty); ``formula``: how it is computed
    (plain text with Unicode symbols); ``sentence``: what it means, for a reader who owns content;
    ``paper``: where it comes from (may be empty).
    """

    key: str
    label: str
    symbol: str
    formula: str
    sentence: str
    paper: str = ""

    @property
    def anchor(self) -> str:
        """The fragment id of this term on the glossary page (``glossary-<key>``)."""
        return anchor(self.key)


_TERMS: tuple[Term, ...] = (
    Term("retrievability", "retrievability", "r(d)",
         "r(d) = Σ_q o_q · 1[rank of d for q ≤ c]",
         "How many searches of the log show the document in their top c results, each search "
         "counted as often as it was issued.",
         "Azzopardi & Vinay, CIKM 2008"),
    Term("cutoff", "results looked at", "c",
         "c: the rank up to which a result counts as seen by r(d)",
         "How far down the result list a searcher is assumed to look when counting retrievability "
         "(top 10, top 100).",
         "Azzopardi & Vinay, CIKM 2008"),
    Term("depth", "results stored per search", "n",
         "n: the store keeps each query's top n results",
         "How many results of every search the audit kept; nothing below rank n is known."),
    Term("gini", "inequality (Gini)", "G",
         "G = Σ_i (2i − N − 1) · r_(i) / (N · Σ_i r_(i)), r_(i) ascending over N documents",
         "0 when every document is shown equally often, 1 when one document gets all the "
         "attention; the area between the Lorenz curve and the diagonal, doubled.",
         "Gastwirth 1972; used for retrievability by Azzopardi & Vinay, CIKM 2008"),
    Term("gini_retrieved_only", "inequality among documents some search returns", "G₊",
         "G over the documents in at least one stored result list (any rank up to the stored depth)",
         "The same inequality measure, leaving out the documents no search returns at any stored "
         "rank: at a small cutoff it still counts a document seen only further down the lists, so "
         "it equals G when every document is returned somewhere."),
    Term("lorenz", "Lorenz curve", "L(x)",
         "L(x) = share of all retrievability held by the least retrievable share x of documents",
         "Read it as: the poorest x % of documents get L(x) % of the attention; the diagonal is "
         "perfect equality, the further below it the more unequal.",
         "Lorenz 1905"),
    Term("retrievable_fraction", "share of documents shown at least once", "",
         "|{d : r(d) > 0}| / N",
         "The share of the collection that at least one search of the log shows in its top c."),
    Term("query_weight", "times the search was issued", "o_q",
         "o_q: the count of query q in the log",
         "How often people typed this search; every figure counts a search this many times."),
    Term("rank", "rank", "ρ",
         "ρ(d, σ_q): the position of d in the ranking σ_q of query q (ρ = rank − 1, 0-based)",
         "The position at which a search shows the document: 1 is the top result.",
         "Li et al., Exposing Query Identification for Search Transparency, WWW 2022"),
    Term("exposure", "attention", "μ",
         "μ_{q→d} = browsing model weight of the rank of d for q",
         "The chance that a searcher who ran this search looks at the document, under the "
         "chosen browsing model: 1 for certain, 0 for never.",
         "Li et al., WWW 2022; Diaz et al., CIKM 2020"),
    Term("total_exposure", "total attention", "Σμ",
         "Σ_q μ_{q→d} over the log's distinct searches",
         "The number of searchers expected to look at the document if every distinct search "
         "were run once."),
    Term("weighted_exposure", "attention over the whole log", "Σ o_q μ",
         "Σ_q o_q · μ_{q→d}",
         "The number of searchers expected to look at the document over the whole log, each "
         "search counted as often as it was issued."),
    Term("browsing_model", "browsing model", "μ(ρ)",
         "rbp:γ → γ^ρ · dcg → 1 / log₂(ρ + 2) · exhaustive → 1 · cutoff:c → 1[ρ < c]",
         "An assumption about how far down the results a searcher reads; it turns a rank into the "
         "chance of being looked at.",
         "Moffat & Zobel, TOIS 2008 (RBP); Järvelin & Kekäläinen, TOIS 2002 (DCG)"),
    Term("rbp", "patient searcher", "γ",
         "μ(ρ) = γ^ρ",
         "A searcher who reads down the list and, after each result, goes on to the next one "
         "with probability γ (stops with probability 1 − γ).",
         "Moffat & Zobel, TOIS 2008"),
    Term("exposing_queries", "searches that show the document", "ψ_d",
         "ψ_d = {q : ρ(d, σ_q) < n}, ordered by rank of d",
         "Every search of the log that puts the document in its stored results, the ones that "
         "rank it highest first.",
         "Li et al., WWW 2022"),
    Term("exposure_bar", "how high the search ranks the document", "n − ρ(d, σ_q)",
         "height = n − ρ(d, σ_q): n for the top result, 1 for the last stored one",
         "The bar is tallest when the search shows the document first.",
         "Li et al., WWW 2022 (Figure 1)"),
    Term("eqi", "finding the searches that show a document", "EQI",
         "exact: score the document against every query; learned: a model that predicts them",
         "Exposing query identification: given a page, which searches of the log would show it.",
         "Li et al., WWW 2022"),
    Term("relq", "quality of a list of exposing searches", "RELQ",
         "RELQ = Σ_i μ(i) · gain(q_i) / ideal",
         "How well a predicted list of exposing searches matches the true one, the top of the "
         "list counting most.",
         "Li et al., WWW 2022"),
    Term("bm25_share", "share of the match score", "w_t / s(q, d)",
         "BM25: s(q, d) = Σ_t w_t, w_t = idf(t) · tf·(k₁+1) / (tf + k₁·(1 − b + b·|d|/avgdl))",
         "How much of the keyword match score each shared word contributes; the shares of the "
         "matched words add up to the whole score.",
         "Robertson & Zaragoza, Foundations and Trends in IR 2009"),
    Term("cosine", "closeness of meaning", "cos(q, s)",
         "cos(q, s) = q·s / (‖q‖ ‖s‖) of the embeddings of the search and of a sentence",
         "How close in meaning a sentence of the document is to the search, from −1 to 1; the "
         "dense model ranks documents by this closeness."),
    Term("near_miss", "searches that almost show the document", "",
         "queries with 100 < rank of d ≤ 1000",
         "Searches that rank the document just below what searchers look at (ranks 101 to "
         "1,000): small changes to the page could bring it into view."),
    Term("group_exposure_share", "share of attention", "E(G) / Σ E",
         "E(G) = Σ_q o_q Σ_{d∈G} μ_{q→d}; share = E(G) / Σ_G E(G)",
         "The part of all searchers' attention that goes to the documents of a group.",
         "Singh & Joachims, KDD 2018"),
    Term("group_size_share", "share of documents", "|G| / N",
         "|G| / N",
         "The part of the collection that belongs to a group: a fair share of attention if every "
         "document deserved the same."),
    Term("merit_share", "share of relevance", "M(G) / Σ M",
         "M(G) = Σ_{d∈G} merit(d); share = M(G) / Σ_G M(G)",
         "The part of all judged relevance that a group's documents hold: a fair share of "
         "attention if attention should follow relevance.",
         "Singh & Joachims, KDD 2018"),
    Term("disparity", "attention gap", "Δ(G)",
         "Δ(G) = exposure share − target share",
         "How much more (positive) or less (negative) attention a group gets than its target "
         "share."),
    Term("demographic_parity", "demographic parity gap", "DP",
         "DP = E(G₀)/|G₀| − E(G₁)/|G₁|",
         "Difference in average attention per document between two groups; 0 is parity.",
         "Singh & Joachims, KDD 2018"),
    Term("disparate_treatment", "disparate treatment ratio", "DTR",
         "DTR = (E(G₀)/M(G₀)) / (E(G₁)/M(G₁))",
         "Ratio of attention per unit of relevance between two groups; 1 is fair.",
         "Singh & Joachims, KDD 2018"),
    Term("disparate_impact", "disparate impact ratio", "DIR",
         "DIR = (CTR(G₀)/M(G₀)) / (CTR(G₁)/M(G₁))",
         "Ratio of expected clicks per unit of relevance between two groups; 1 is fair.",
         "Singh & Joachims, KDD 2018"),
    Term("awrf", "attention-weighted rank fairness", "AWRF",
         "AWRF = Σ_q o_q · distance(attention-weighted group distribution of q, target)",
         "How far the groups shown across the ranking are from the target mix, the top ranks "
         "weighing most; 0 is the target mix.",
         "Sapiezynski et al., WWW 2019; TREC Fair Ranking 2021-22"),
    Term("expected_exposure", "expected exposure gap", "EE-D, EE-R, EE-L",
         "EE-L = ‖ε − ε*‖², EE-D = ‖ε‖², EE-R = 2 ε·ε* (ε: exposure, ε*: target exposure)",
         "How far each group's attention is from what an ideal searcher-independent policy "
         "would give it (EE-L, lower is fairer), split into how spread (EE-D) and how relevant "
         "(EE-R) the attention is.",
         "Diaz et al., CIKM 2020"),
    Term("mean_r", "average retrievability", "mean r(d)",
         "Σ_{d∈G} r(d) / |G|",
         "How many searches show a typical document of the group."),
    Term("r_share", "share of retrievability", "Σ_{d∈G} r(d) / Σ_d r(d)",
         "Σ_{d∈G} r(d) / Σ_d r(d)",
         "The part of all retrievability that goes to the documents of a group."),
    Term("score", "match score", "s(q, d)",
         "the ranking system's score of d for q (BM25, cosine, fused)",
         "The number the ranking system sorts by; only comparable within one search."),
    Term("system", "search system", "σ",
         "σ_q: the ranking a system returns for query q",
         "One of the rankers the audit replays the log against (limelight's own or an external "
         "engine, or results read from a run file)."),
)

#: every term by key
TERMS: dict[str, Term] = {t.key: t for t in _TERMS}

#: table and JSON field names → the words a page shows (a term's label where one exists)
FIELD_LABELS: dict[str, str] = {
    "gini": TERMS["gini"].label,
    "gini_retrieved_only": TERMS["gini_retrieved_only"].label,
    "retrievable_fraction": TERMS["retrievable_fraction"].label,
    "r": TERMS["retrievability"].label,
    "r_mean": TERMS["mean_r"].label,
    "r_share": TERMS["r_share"].label,
    "weight": TERMS["query_weight"].label,
    "exposure": TERMS["exposure"].label,
    "weighted_exposure": TERMS["weighted_exposure"].label,
    "n_docs": "documents",
    "n_queries": "searches",
    "n_exposing": "searches that show it",
    "n_retrieved": "results stored",
    "best_rank": "best rank",
    "rank": "rank",
    "score": TERMS["score"].label,
    "group": "group",
    "c": TERMS["cutoff"].label,
    "depth": TERMS["depth"].label,
    "system": TERMS["system"].label,
    "exposure_share": TERMS["group_exposure_share"].label,
    "size_share": TERMS["group_size_share"].label,
    "merit_share": TERMS["merit_share"].label,
    "disparity": TERMS["disparity"].label,
}


@dataclass(frozen=True)
class BrowsingChoice:
    """A browsing model a page offers: its spelling for ``parse_browsing_model``, a short label
    and one sentence."""

    spec: str
    label: str
    sentence: str


#: the browsing models the pages offer, the default first
BROWSING_CHOICES: tuple[BrowsingChoice, ...] = (
    BrowsingChoice("rbp:0.8", "patient reader",
                   "a searcher who reads down the list and stops with probability 20 % at each "
                   "result"),
    BrowsingChoice("rbp:0.5", "impatient reader",
                   "a searcher who reads down the list and stops with probability 50 % at each "
                   "result"),
    BrowsingChoice("dcg", "slowly tiring reader",
                   "a searcher whose attention fades slowly with the rank, as nDCG assumes "
                   "(1 / log₂(rank + 1))"),
    BrowsingChoice("cutoff:10", "first page only",
                   "a searcher who looks at every one of the top 10 results and none below"),
    BrowsingChoice("exhaustive", "reads everything",
                   "a searcher who looks at every stored result, however low"),
)


def anchor(key: str) -> str:
    """The fragment id of term ``key`` on the glossary page (``glossary-<key>``)."""
    return f"glossary-{key}"


def term(key: str) -> Term:
    """The term ``key`` (``KeyError`` naming the known keys when absent)."""
    try:
        return TERMS[key]
    except KeyError:
        raise KeyError(f"no glossary term {key!r} (terms: {', '.join(TERMS)})") from None


def label(field: str) -> str:
    """The words for a table or JSON field name (the name with underscores as spaces when the
    glossary has none)."""
    return FIELD_LABELS.get(field) or (TERMS[field].label if field in TERMS else field.replace("_", " "))


def browsing_choice(spec: str) -> BrowsingChoice | None:
    """The offered browsing model spelled ``spec`` (``None`` when it is not one of them)."""
    s = spec.strip().lower()
    return next((b for b in BROWSING_CHOICES if b.spec == s), None)


