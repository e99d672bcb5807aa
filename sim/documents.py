"""Attention under a document mask: the keys a query attends to when packed sequences keep documents apart.

A stack that masks attention at document boundaries (TorchTitan's DeepSeek-V3 flavors at 1a36996b:
``attn_type = "flex"``, ``attn_mask_type = "block_causal"``, documents delimited by EOS in the packed stream)
computes, per query, the keys of its own document up to itself, not the whole causal prefix of the sequence.
How many that is depends on the training data's document lengths and on where sequence boundaries cut them:
a token at position p of its document segment attends to p + 1 keys, so the mean over tokens is
(E[sum of squared segment lengths] + E[L]) / (2 E[L]) per document of length L.

Documents: log-normal lengths through a measured C4 sample's median and 95th percentile (234 and 1,424 tokens over
2,000 C4 documents, noted in a public evaluation script found through the code index; tokenizer of a recent LLM). The
log-normal's mean, 427 tokens, agrees with C4.en as published (about 156B tokens over 365M documents, T5 tokenizer),
which checks the tail the 95th percentile sets. Other tokenizers move token counts by some 10-20%, and the result
with them. Each document starts at a uniform offset within a sequence and is cut at every sequence boundary it
crosses. FlexAttention computes whole 128 x 128 blocks wherever any pair is
unmasked (``torch.nn.attention.flex_attention._DEFAULT_SPARSE_BLOCK_SIZE``): the block holding a document's
first keys and the diagonal block add about one block of computed keys per query.

>>> round(attended_keys(8192)), round(attended_keys(4096)), round(attended_keys(256))
(720, 636, 128)
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["C4_MEDIAN_TOKENS", "C4_P95_TOKENS", "FLEX_BLOCK", "attended_keys", "segment_mean_position"]

#: C4 document length in tokens, median and 95th percentile of a measured 2,000-document sample (a public evaluation
#: script's note); log-normal through them (mean 427, C4.en's published tokens per document).
C4_MEDIAN_TOKENS = 234.0
C4_P95_TOKENS = 1424.0
#: FlexAttention's default sparse block (query and key rows per block of the block mask).
FLEX_BLOCK = 128
_Z95 = 1.6448536269514722  # the standard normal's 95th percentile


@lru_cache(maxsize=64)
def segment_mean_position(seq_len: int, median: float = C4_MEDIAN_TOKENS, p95: float = C4_P95_TOKENS) -> float:
    """Mean over tokens of (position within its document segment + 1): the keys a query attends to under an exact
    document mask, for log-normal document lengths (``median``, ``p95``) packed into sequences of ``seq_len``."""
    if seq_len < 1 or not 0 < median < p95:
        raise ValueError(f"need seq_len >= 1 and 0 < median < p95, got {seq_len}, {median}, {p95}")
    mu, sigma = math.log(median), math.log(p95 / median) / _Z95
    z = np.linspace(-6.0, 6.0, 1201)
    weight = np.exp(-0.5 * z * z)
    weight /= weight.sum()
    lengths = np.maximum(1.0, np.exp(mu + sigma * z))[:, None]
    start = (np.arange(256) + 0.5)[None, :] / 256 * seq_len  # the document's offset within its first sequence
    first = np.minimum(lengths, seq_len - start)
    rest = lengths - first
    full = np.floor(rest / seq_len)
    last = rest - full * seq_len
    squares = (first * first + full * seq_len * seq_len + last * last).mean(axis=1)
    mean_len = float((weight * lengths[:, 0]).sum())
    return float(((weight * squares).sum() + mean_len) / (2 * mean_len))


def attended_keys(seq_len: int, median: float = C4_MEDIAN_TOKENS, p95: float = C4_P95_TOKENS) -> float:
    """Keys per query a block-sparse kernel (FlexAttention) computes under a document mask: the exact mean
    (:func:`segment_mean_position`) plus one :data:`FLEX_BLOCK`, at most the causal mean (a causal kernel's own
    partial diagonal tiles are not counted either, so a mask never costs more than causal attention here)."""
    return min((seq_len + 1) / 2, segment_mean_position(seq_len, median, p95) + FLEX_BLOCK)
