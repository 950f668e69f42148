"""TK (Transformer-Kernel, Hofstätter et al., ECAI 2020) and KNRM (Xiong et al., SIGIR 2017).

Plain, device-agnostic PyTorch. Both models score a (query, document) pair of token-id sequences
(``0`` = padding, ``1`` = OOV, both masked) and expose their intermediate kernel scores, so that a
score is exactly the sum of its per-kernel contributions (:meth:`KernelRanker.explain`).

TK, equation by equation (paper §3):

1. ``t̂_i = t_i·α + context(t_{1:n})_i·(1-α)`` with a learned scalar ``α`` (initialised at 0.5);
2. ``context`` = ``l`` Transformer layers over ``p = t + PE`` (sinusoidal positional encoding);
   each layer is ``MultiHead(FF(p)) + FF(p)`` (eq. 2) as the reference AllenNLP encoder computes
   it: ``h = LayerNorm(p + FF(p))``, ``out = LayerNorm(h + MultiHead(h))``, FF = two linear layers
   with a ReLU between;
3. multi-head scaled dot-product attention (eq. 3), padding/OOV keys masked;
4. ``M_ij = cos(q̂_i, d̂_j)`` (eq. 4), padded/OOV rows and columns masked;
5. 11 RBF kernels ``exp(-(M_ij-μ_k)²/(2σ²))`` with μ ∈ {1.0, 0.9, 0.7, …, -0.9}, σ = 0.1 and no
   exact-match kernel (eq. 5);
6. ``K_i^k = Σ_j K_ij^k`` (eq. 6);
7. ``s_log^k = Σ_i log2(K_i^k)`` (eq. 7; ``K_i^k`` clamped at 1e-10 as the reference does);
8. ``s_len^k = Σ_i K_i^k / d_len`` with ``d_len`` the number of unmasked document tokens (eq. 8);
9. ``s_log = s_log^k·W_log``, ``s_len = s_len^k·W_len`` (eq. 9, no bias);
10. ``s = s_log·β + s_len·γ`` (eq. 10).

Sizes: the paper uses 300-d GloVe with 16 heads of size 32 (attention width 512 ≈ 1.7 × the
embedding width) and a feed-forward width of 100. With 50-d GloVe we keep the ratio of the
attention width to the embedding width and the feed-forward width: 10 heads of size 8 (80 ≈
1.6 × 50) and a feed-forward width of 100 (``TKConfig``).

KNRM: the same kernels on the cosine matrix of the (non-contextualized) embeddings, with the
first kernel (μ = 1) an exact-match kernel (σ = 1e-4); ``s = Σ_k w_k Σ_i ln(K_i^k)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

MUS: tuple[float, ...] = (1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9)


def kernel_sigmas(sigma: float = 0.1, exact_sigma: float | None = None) -> tuple[float, ...]:
    """σ of each kernel of ``MUS``: all ``sigma``, the μ = 1 kernel ``exact_sigma`` if given."""
    return tuple(exact_sigma if (exact_sigma is not None and m == 1.0) else sigma for m in MUS)


@dataclass
class TKConfig:
    """Hyper-parameters of TK (defaults: the paper's, adapted to 50-d embeddings)."""

    n_layers: int = 2
    n_heads: int = 10
    head_dim: int = 8
    ff_dim: int = 100
    dropout: float = 0.0
    max_query_len: int = 30
    max_doc_len: int = 200
    mus: tuple[float, ...] = MUS
    sigmas: tuple[float, ...] = field(default_factory=lambda: kernel_sigmas(0.1))
    log_base: float = 2.0

    kind = "tk"


@dataclass
class KNRMConfig:
    """Hyper-parameters of KNRM: 11 kernels, the μ = 1 kernel an exact-match one (σ = 1e-4)."""

    max_query_len: int = 30
    max_doc_len: int = 200
    mus: tuple[float, ...] = MUS
    sigmas: tuple[float, ...] = field(default_factory=lambda: kernel_sigmas(0.1, 1e-4))

    kind = "knrm"


def config_to_dict(cfg: TKConfig | KNRMConfig) -> dict:
    d = asdict(cfg)
    d["kind"] = cfg.kind
    d["mus"], d["sigmas"] = list(cfg.mus), list(cfg.sigmas)
    return d


def config_from_dict(d: dict) -> TKConfig | KNRMConfig:
    d = dict(d)
    kind = d.pop("kind")
    d["mus"], d["sigmas"] = tuple(d["mus"]), tuple(d["sigmas"])
    return TKConfig(**d) if kind == "tk" else KNRMConfig(**d)


def sinusoidal_positions(length: int, dim: int, device=None) -> torch.Tensor:
    """The Transformer's sinusoidal positional encoding ``(length, dim)``."""
    pos = torch.arange(length, dtype=torch.float32, device=device).unsqueeze(1)
    half = dim // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=device)
                     / max(half - 1, 1))
    ang = pos * freq.unsqueeze(0)
    pe = torch.zeros(length, dim, device=device)
    pe[:, 0:2 * half:2] = torch.sin(ang)
    pe[:, 1:2 * half:2] = torch.cos(ang)
    return pe


class MultiHead(nn.Module):
    """Multi-head scaled dot-product self-attention (eq. 3) with a key padding mask."""

    def __init__(self, dim: int, n_heads: int, head_dim: int, dropout: float = 0.0):
        super().__init__()
        self.n_heads, self.head_dim, self.dropout = n_heads, head_dim, dropout
        self.qkv = nn.Linear(dim, 3 * n_heads * head_dim)
        self.out = nn.Linear(n_heads * head_dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        # additive key mask; a finite large negative keeps all-masked rows finite (uniform)
        bias = (~mask).to(x.dtype).mul(-1e4).view(b, 1, 1, n)
        att = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=bias,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.out(att.transpose(1, 2).reshape(b, n, self.n_heads * self.head_dim))


class TransformerLayer(nn.Module):
    """One TK layer (eq. 2): ``h = LN(p + FF(p))``, ``out = LN(h + MultiHead(h))``."""

    def __init__(self, dim: int, n_heads: int, head_dim: int, ff_dim: int, dropout: float = 0.0):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(dim, ff_dim), nn.ReLU(), nn.Linear(ff_dim, dim))
        self.norm_ff = nn.LayerNorm(dim)
        self.att = MultiHead(dim, n_heads, head_dim, dropout)
        self.norm_att = nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, p: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm_ff(p + self.drop(self.ff(p)))
        return self.norm_att(h + self.drop(self.att(h, mask)))


@dataclass
class KernelScores:
    """Intermediate results of a kernel model for a batch of (query, document) pairs.

    ``s_log`` / ``s_len``: ``(B, K)`` per-kernel scores (``s_len`` is all zero for KNRM);
    ``contrib_log`` / ``contrib_len``: their weighted contributions, so that
    ``score == contrib_log.sum(1) + contrib_len.sum(1)``; ``match``: ``(B, Lq, Ld)`` cosine
    matrix (0 where masked); ``q_mask``/``d_mask``: valid (in-vocabulary, non-padding) tokens.
    """

    score: torch.Tensor
    s_log: torch.Tensor
    s_len: torch.Tensor
    contrib_log: torch.Tensor
    contrib_len: torch.Tensor
    match: torch.Tensor
    q_mask: torch.Tensor
    d_mask: torch.Tensor


class KernelRanker(nn.Module):
    """Shared parts of TK and KNRM: embeddings, cosine matrix, kernel pooling, scoring."""

    config: TKConfig | KNRMConfig

    def __init__(self, embeddings: torch.Tensor, config: TKConfig | KNRMConfig,
                 freeze_embeddings: bool = False):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding.from_pretrained(embeddings.clone().float(),
                                                      freeze=freeze_embeddings, padding_idx=0)

    @property
    def n_kernels(self) -> int:
        return len(self.config.mus)

    @property
    def vocab_size(self) -> int:
        return self.embedding.num_embeddings

    # ---- representation --------------------------------------------------------------------
    def encode(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Term representations ``(B, L, dim)`` and valid-token mask ``(B, L)`` of id sequences."""
        raise NotImplementedError

    # ---- interaction -----------------------------------------------------------------------
    def kernel_features(self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor,
                        d_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cosine matrix (eq. 4) and per-query-term kernel sums ``K_i^k`` (eq. 5-6), masked."""
        qn = F.normalize(q, p=2, dim=-1, eps=1e-10)
        dn = F.normalize(d, p=2, dim=-1, eps=1e-10)
        qd_mask = (q_mask.unsqueeze(2) & d_mask.unsqueeze(1)).to(q.dtype)
        match = torch.bmm(qn, dn.transpose(1, 2)) * qd_mask
        # one kernel at a time keeps the temporaries at (B, Lq, Ld): several times faster on
        # CPU than one (B, Lq, Ld, K) tensor; the document sum (eq. 6) is a masked bmm
        dcol = d_mask.to(q.dtype).unsqueeze(-1)
        per_term = []
        for mu, sigma in zip(self.config.mus, self.config.sigmas, strict=True):
            k = torch.exp((match - mu).square() * (-0.5 / (sigma * sigma)))
            per_term.append(torch.bmm(k, dcol))
        per_term_t = torch.cat(per_term, -1) * q_mask.to(q.dtype).unsqueeze(-1)
        return match, per_term_t, qd_mask

    def pool(self, per_term: torch.Tensor, q_mask: torch.Tensor,
             d_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-kernel ``(s_log, s_len)``, each ``(B, K)``."""
        raise NotImplementedError

    def combine(self, s_log: torch.Tensor, s_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-kernel weighted contributions ``(B, K)`` of both paths."""
        raise NotImplementedError

    def score_encoded(self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor,
                      d_mask: torch.Tensor, details: bool = False) -> torch.Tensor | KernelScores:
        """Scores of already encoded queries/documents (one query row per document row)."""
        match, per_term, _ = self.kernel_features(q, q_mask, d, d_mask)
        s_log, s_len = self.pool(per_term, q_mask, d_mask)
        c_log, c_len = self.combine(s_log, s_len)
        score = c_log.sum(1) + c_len.sum(1)
        if not details:
            return score
        return KernelScores(score, s_log, s_len, c_log, c_len, match, q_mask, d_mask)

    def forward(self, q_ids: torch.Tensor, d_ids: torch.Tensor) -> torch.Tensor:
        """Scores ``(B,)`` of query ids ``(B, Lq)`` against document ids ``(B, Ld)``."""
        q, qm = self.encode(q_ids)
        d, dm = self.encode(d_ids)
        return self.score_encoded(q, qm, d, dm)

    def explain(self, q_ids: torch.Tensor, d_ids: torch.Tensor) -> KernelScores:
        """All intermediate kernel scores for each pair (see :class:`KernelScores`)."""
        q, qm = self.encode(q_ids)
        d, dm = self.encode(d_ids)
        return self.score_encoded(q, qm, d, dm, details=True)


class TK(KernelRanker):
    """The Transformer-Kernel model (eq. 1-10)."""

    def __init__(self, embeddings: torch.Tensor, config: TKConfig | None = None,
                 freeze_embeddings: bool = False):
        config = config or TKConfig()
        super().__init__(embeddings, config, freeze_embeddings)
        dim = embeddings.shape[1]
        self.layers = nn.ModuleList(
            TransformerLayer(dim, config.n_heads, config.head_dim, config.ff_dim, config.dropout)
            for _ in range(config.n_layers))
        self.alpha = nn.Parameter(torch.tensor(0.5))
        self.w_log = nn.Parameter(torch.empty(self.n_kernels).uniform_(-0.014, 0.014))
        self.w_len = nn.Parameter(torch.empty(self.n_kernels).uniform_(-0.014, 0.014))
        self.beta = nn.Parameter(torch.tensor(1.0))
        self.gamma = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("pe", sinusoidal_positions(max(config.max_doc_len, config.max_query_len), dim),
                             persistent=False)

    def contextualize(self, emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``context(t_{1:n})``: the Transformer layers over embeddings + positions."""
        n = emb.shape[1]
        pe = self.pe[:n] if n <= self.pe.shape[0] else sinusoidal_positions(n, emb.shape[2], emb.device)
        h = (emb + pe.unsqueeze(0)) * mask.unsqueeze(-1).to(emb.dtype)
        for layer in self.layers:
            h = layer(h, mask)
        return h

    def encode(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = ids > 1
        t = self.embedding(ids) * mask.unsqueeze(-1).to(torch.float32)
        if not self.layers:
            return t, mask
        ctx = self.contextualize(t, mask)
        return t * self.alpha + ctx * (1 - self.alpha), mask

    def pool(self, per_term, q_mask, d_mask):
        qm = q_mask.to(per_term.dtype).unsqueeze(-1)
        logk = torch.log(torch.clamp(per_term, min=1e-10)) / math.log(self.config.log_base)
        s_log = (logk * qm).sum(1)
        d_len = d_mask.sum(1).clamp(min=1).to(per_term.dtype).view(-1, 1, 1)
        s_len = (per_term / d_len * qm).sum(1)
        return s_log, s_len

    def combine(self, s_log, s_len):
        return s_log * (self.w_log * self.beta), s_len * (self.w_len * self.gamma)


class KNRM(KernelRanker):
    """KNRM: kernel pooling over the (fine-tuned) word-embedding cosine matrix."""

    def __init__(self, embeddings: torch.Tensor, config: KNRMConfig | None = None,
                 freeze_embeddings: bool = False):
        super().__init__(embeddings, config or KNRMConfig(), freeze_embeddings)
        self.w = nn.Parameter(torch.empty(self.n_kernels).uniform_(-0.014, 0.014))

    def encode(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = ids > 1
        return self.embedding(ids) * mask.unsqueeze(-1).to(torch.float32), mask

    def pool(self, per_term, q_mask, d_mask):
        qm = q_mask.to(per_term.dtype).unsqueeze(-1)
        s_log = (torch.log(torch.clamp(per_term, min=1e-10)) * qm).sum(1)
        return s_log, torch.zeros_like(s_log)

    def combine(self, s_log, s_len):
        return s_log * self.w, torch.zeros_like(s_len)


def build_model(config: TKConfig | KNRMConfig, embeddings: torch.Tensor) -> KernelRanker:
    """A fresh TK or KNRM for ``config`` with initial ``embeddings``."""
    if isinstance(config, TKConfig):
        return TK(embeddings, config)
    return KNRM(embeddings, config)


def param_groups(model: KernelRanker, lr_embed: float = 1e-4, lr_context: float = 1e-4,
                 lr_other: float = 1e-3) -> list[dict]:
    """The paper's Adam groups: 1e-4 for word embeddings and contextualization layers, 1e-3
    for all other layers (kernel weights, α, β, γ)."""
    emb = [p for n, p in model.named_parameters() if n.startswith("embedding") and p.requires_grad]
    ctx = [p for n, p in model.named_parameters() if n.startswith("layers")]
    other = [p for n, p in model.named_parameters()
             if not (n.startswith("embedding") or n.startswith("layers"))]
    groups = [{"params": emb, "lr": lr_embed}, {"params": ctx, "lr": lr_context},
              {"params": other, "lr": lr_other}]
    return [g for g in groups if g["params"]]
