"""Pydantic models of the JSON API (they are what the OpenAPI schema documents)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MAX_TEXT = 100_000  # characters of a pasted document
MAX_QUERY = 1_000  # characters of a search query
MAX_LIMIT = 1_000  # rows per page
MAX_OFFSET = 10_000_000
MAX_EQI_K = 1_000


class Error(BaseModel):
    detail: str = Field(description="a one-line message")


class DPStatement(BaseModel):
    """What a differentially private release of the log promises (OpenDP's own accounting)."""

    epsilon: float = Field(description="per searcher, from OpenDP's privacy map of the measurement")
    delta: float = Field(description="per searcher, from OpenDP's privacy map of the measurement")
    cap: int = Field(description="each searcher's first cap distinct searches are counted, once each")
    threshold: int = Field(description="a search is released when its noisy count of searchers reaches it")
    scale: float = Field(description="the Laplace noise's scale (cap / epsilon)")
    n_released: int = Field(description="searches the release lists")
    statement: str = Field(description="the same in a sentence")


class Privacy(BaseModel):
    """How many of the queries a list could hold are not listed, to protect the searchers'
    privacy (they still count in every total); absent when every query may be shown."""

    k: int = Field(description="a query is listed only when issued at least k times (or by k searchers)")
    basis: str = Field(description="what k counts: 'times issued' or 'distinct searchers'")
    hidden: int = Field(description="queries not listed")
    fewer_than_k: int = Field(description="of them: issued fewer than k times (or by fewer searchers)")
    personal_data: int = Field(description="of them: carrying personal data (e-mail, phone, card or id "
                                           "number, URL with an id) whatever their count")
    not_released: int = Field(default=0, description="of them: not in the differentially private release "
                                                       "(when the operator enables one)")
    dp: DPStatement | None = Field(default=None, description="the DP release the lists follow (null: none)")
    note: str = Field(description="the same in a sentence")


class SystemInfo(BaseModel):
    name: str
    depth: int = Field(description="n_{q→d}: documents kept per query in the exposure store")
    n_queries: int
    settings: dict[str, Any]
    eqi_methods: list[str] = Field(default=[], description="learned EQI models that answer for this system")
    eqi_note: str | None = Field(default=None, description="why no learned EQI model answers for it")


class Info(BaseModel):
    audit: str
    collection: str | None
    n_docs: int
    systems: list[SystemInfo]
    search_models: list[str]
    rerank: bool
    eqi_methods: list[str]
    group_fields: list[str]


class SearchHit(BaseModel):
    rank: int = Field(description="1-based")
    docid: str
    title: str
    score: float
    snippet: str | None = Field(None, description="the passage with the most query terms "
                                "(null when asked with snippets=false)")
    highlights: list[list[int]] | None = Field(None, description="[start, end) character offsets of query "
                                               "terms in snippet (null when asked with snippets=false)")


class SearchResults(BaseModel):
    query: str
    model: str
    rerank: bool
    total: int
    offset: int
    limit: int
    results: list[SearchHit]


class ExposingQuery(BaseModel):
    qid: str
    query: str
    weight: float = Field(description="o_q: occurrences of the query in the log")
    rank: int = Field(description="1-based rank of the document in the query's results")
    score: float
    exposure: float = Field(description="μ_{q→d}(rank) under the chosen browsing model")


class ChartBar(BaseModel):
    position: int = Field(description="x: 1-based position in the exposure list (ρ(q, ψ_d) + 1)")
    qid: str
    query: str
    rank: int
    height: int = Field(description="y: n_{q→d} − ρ(d, σ_q) (higher = more exposing)")


class DocumentSystem(BaseModel):
    system: str
    depth: int
    c: int = Field(description="the retrievability cutoff (100, or the store's depth if smaller)")
    n_exposing: int = Field(description="queries whose top-n contains the document")
    n_exposing_c: int = Field(description="queries whose top-c contains the document")
    best_rank: int | None = Field(description="the best (smallest) rank of the document over the queries")
    exposure: float = Field(description="Σ_q μ_{q→d}(rank) under the page's browsing model")
    r: float = Field(description="r(d) at c with the stored query weights o_q")


class TopSearch(BaseModel):
    qid: str
    query: str
    weight: float = Field(description="o_q: times the search was issued")
    rank: int
    exposure: float = Field(description="μ: the chance a searcher looks at the document at its rank")
    attention: float = Field(description="o_q · μ: searchers expected to look at it over the log")


class HistogramBin(BaseModel):
    label: str = Field(description="the range of r(d) of the bin (0, 1, 2–3, 4–7, ...)")
    n: int = Field(description="documents in the bin")
    here: bool = Field(description="the bin of this document")


class Standing(BaseModel):
    c: int = Field(description="the cutoff of r(d): the audit's smallest")
    n_queries: int = Field(description="distinct searches of the log")
    total_weight: float = Field(description="searches of the log, each counted as often as it was issued")
    r: float = Field(description="this document's r(d) at c")
    median: float = Field(description="the median r(d) over every document")
    n_docs: int
    n_zero: int = Field(description="documents with r(d) = 0 at c")
    share_below: float = Field(description="share of documents with a smaller r(d)")
    share_above: float = Field(description="share of documents with a larger r(d)")
    bins: list[HistogramBin]


class Document(BaseModel):
    docid: str
    title: str
    text: str
    fields: dict[str, Any]
    system: str
    browsing_model: str
    depth: int
    n_exposing: int = Field(description="queries whose top-n contains the document")
    exposure: float = Field(description="Σ_q μ_{q→d}(rank)")
    weighted_exposure: float = Field(description="Σ_q o_q · μ_{q→d}(rank)")
    total: int
    offset: int
    limit: int
    queries: list[ExposingQuery]
    chart: list[ChartBar]
    systems: list[DocumentSystem] = Field(description="the document's exposure under every audited system")
    top_searches: list[TopSearch] = Field(default=[], description="the searches giving it the most attention "
                                                                  "over the log (o_q · μ)")
    standing: Standing | None = Field(default=None, description="where its r(d) stands among every document's")
    privacy: Privacy | None = Field(default=None, description="queries hidden from this list for the "
                                                              "searchers' privacy (portal; null: none screened)")


class ExposedDocument(BaseModel):
    docid: str
    title: str
    rank: int
    score: float
    exposure: float


class Query(BaseModel):
    qid: str
    query: str
    weight: float
    system: str
    browsing_model: str
    depth: int
    total: int
    threshold: float | None = Field(description="score at rank n (null: fewer than n retrieved)")
    offset: int
    limit: int
    documents: list[ExposedDocument]


class QueryMatch(BaseModel):
    qid: str
    query: str
    weight: float
    n_retrieved: int


class QueryList(BaseModel):
    search: str
    system: str
    total: int
    offset: int
    limit: int
    queries: list[QueryMatch]


class Lorenz(BaseModel):
    x: list[float] = Field(description="cumulative share of documents (ascending r(d))")
    y: list[float] = Field(description="cumulative share of retrievability")


class RetrievabilitySummary(BaseModel):
    system: str
    c: int
    gini: float = Field(description="over every document of the collection")
    gini_retrieved_only: float
    retrievable_fraction: float
    n_docs: int
    n_queries: int
    lorenz: Lorenz


class RankedDocument(BaseModel):
    rank: int
    docid: str
    title: str
    r: float


class RankedDocuments(BaseModel):
    system: str
    c: int
    order: str
    total: int
    offset: int
    limit: int
    documents: list[RankedDocument]


class Group(BaseModel):
    group: str
    n_docs: int
    r_sum: float
    r_mean: float
    r_share: float
    retrievable_fraction: float


class Groups(BaseModel):
    system: str
    c: int
    field: str
    total: int
    offset: int
    limit: int
    groups: list[Group]


# a character that is whitespace neither for JSON Schema / Unicode nor for Python's str.strip
# (which also strips the separators U+001C-U+001F and U+0085): a text matching it is not blank
NONBLANK = r"[^\s\x1c-\x1f\x85]"


class EqiRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_TEXT, pattern=NONBLANK,
                      description="the new or edited document (not blank)")
    system: str | None = Field(default=None, max_length=200, description="audited system (default: the first)")
    k: int = Field(default=20, ge=1, le=MAX_EQI_K, description="n_{d→q}: exposing queries to return")


class EqiQuery(BaseModel):
    position: int = Field(description="1-based position in this list")
    qid: str
    query: str
    weight: float
    rank: int | None = Field(description="1-based rank the document would get for the query in the system "
                                         "(exact reverse search); null when it would not be in the top n")
    score: float | None
    in_both: bool = Field(description="also in the other list (the dotted bars of the paper's Figure 1)")


class EqiList(BaseModel):
    method: str
    available: bool
    message: str | None = None
    n_exposing: int | None = Field(default=None, description="exact: every query that would expose the document")
    queries: list[EqiQuery]
    privacy: Privacy | None = Field(default=None, description="queries hidden from this list for the "
                                                              "searchers' privacy (portal; null: none screened)")


class EqiResults(BaseModel):
    system: str
    depth: int
    k: int
    exact: EqiList
    learned: list[EqiList]
    note: str | None


class Explanation(BaseModel):
    docid: str
    qid: str
    query: str
    system: str
    rank: int | None = Field(description="the document's stored rank for the query (null: not in its top n)")
    score: float | None
    explained: bool
    reason: str | None = Field(description="why there is no explanation (null when explained)")
    parts: list[dict[str, Any]] = Field(description="bm25: matched terms with contribution and share of the "
                                                    "score, query_html/doc_html with <mark>; dense: the "
                                                    "closest sentences with their cosine")


class NearMiss(BaseModel):
    qid: str
    query: str
    rank: int
    score: float
    shared_terms: list[str]


class NearMisses(BaseModel):
    docid: str
    system: str
    first_rank: int
    last_rank: int
    available: bool
    reason: str | None
    total: int = Field(default=0, description="log queries ranking the document between first_rank and "
                                               "last_rank, listed or not (hidden ones included)")
    queries: list[NearMiss]
    privacy: Privacy | None = Field(default=None, description="queries hidden from this list for the "
                                                              "searchers' privacy (portal; null: none screened)")


class Fairness(BaseModel):
    system: str
    field: str
    target: str
    merit_system: str | None
    summary: dict[str, Any]
    groups: list[dict[str, Any]] = Field(description="per group: size, exposure and target shares, their gap, "
                                                     "Singh & Joachims' ratios, with _lo/_hi intervals")
    contributors: list[dict[str, Any]] = Field(description="the documents carrying each group's gap")


class DocumentPerformance(BaseModel):
    docid: str
    title: str
    impressions: float = Field(description="times shown in the top c: Σ o_q over the searches ranking it within c")
    searches: int = Field(description="distinct searches ranking it within c")
    average_position: float | None = Field(description="its rank averaged over the impressions (null: none)")
    attention: float = Field(description="searchers expected to look at it under the browsing model, every "
                                         "stored rank (Σ o_q · μ(rank))")


class Performance(BaseModel):
    """Search Console's performance figures of the request's documents (an owner's own)."""

    system: str
    browsing_model: str
    c: int = Field(description="the cutoff: impressions are times shown in the top c")
    depth: int
    owner: str | None = Field(description="the owner key summed over (null: every document)")
    n_documents: int
    n_shown: int = Field(description="documents with at least one impression")
    impressions: float
    average_position: float | None
    attention: float
    clicks: float | None = Field(description="null: the log has no clicks")
    ctr: float | None
    clicks_note: str
    total_weight: float = Field(description="Σ o_q: every search of the log, counted as issued")
    offset: int
    limit: int
    documents: list[DocumentPerformance]


class OwnerRow(BaseModel):
    owner: str
    n_documents: int
    n_shown: int
    impressions: float
    average_position: float | None
    attention: float


class OwnerPerformance(BaseModel):
    """Every owner's documents summed (admins)."""

    system: str
    browsing_model: str
    c: int
    total: int
    offset: int
    limit: int
    clicks_note: str
    owners: list[OwnerRow]


class TopQuery(BaseModel):
    qid: str
    query: str
    count: float = Field(description="the list's one count, named by its basis: times issued, or the DP "
                                     "release's noisy count of distinct searchers")
    documents: int = Field(description="of the documents asked about, those this search shows in the top c")
    best_position: int = Field(description="the best rank it gives any of them")


class QueryTable(BaseModel):
    """The searches showing a set of documents in the top c, privacy-screened."""

    basis: str = Field(description="what count counts: 'times issued' or the DP release's noisy distinct searchers")
    total: int = Field(description="distinct searches showing the documents in the top c, hidden ones included")
    listed: int = Field(description="of them: those the privacy screen lets through")
    privacy: Privacy | None = Field(default=None, description="searches not listed and why (null: none screened)")
    dp: DPStatement | None = Field(default=None, description="the DP release the list follows (null: none)")
    offset: int
    limit: int
    queries: list[TopQuery]


class OwnerQueries(QueryTable):
    """Your top searches: those showing your documents in the top c (an admin: every document's,
    or one owner's)."""

    system: str
    c: int
    owner: str | None


class CompareFigures(BaseModel):
    impressions: float | None
    searches: float | None = Field(description="distinct searches ranking it within c")
    average_position: float | None
    attention: float | None


class CompareSide(BaseModel):
    audit: str = Field(description="the audit's name and the system")
    system: str
    impressions: float
    searches: float | None
    average_position: float | None
    attention: float
    n_shown: int = Field(description="documents with at least one impression on this side")
    total_weight: float = Field(description="Σ o_q: every search of this side's log, counted as issued")
    top_queries: QueryTable


class CompareDocument(BaseModel):
    docid: str
    title: str
    in_b: bool = Field(description="whether side B's audit holds the document")
    a: CompareFigures
    b: CompareFigures
    diff: CompareFigures = Field(description="B − A (null where either side has none)")


class Comparison(BaseModel):
    """Two audits (or two systems) side by side over the request's documents (an owner's own)."""

    a: CompareSide
    b: CompareSide
    diff: dict[str, float | None] = Field(description="B − A of the totals")
    same_audit: bool
    browsing_model: str
    c: int
    owner: str | None
    docid: str | None
    n_documents: int
    n_in_b: int
    offset: int
    limit: int
    documents: list[CompareDocument]
