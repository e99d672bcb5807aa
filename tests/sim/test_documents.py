"""Document-masked attention (sim.documents): the mean keys per query under a document mask."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.documents import (
    C4_MEDIAN_TOKENS,
    C4_P95_TOKENS,
    FLEX_BLOCK,
    attended_keys,
    segment_mean_position,
)


def test_without_cuts_the_mean_position_is_the_length_biased_half_length() -> None:
    """For sequences far longer than every document, E[L^2 + L] / (2 E[L]) of the log-normal lengths."""
    mu = math.log(C4_MEDIAN_TOKENS)
    sigma = math.log(C4_P95_TOKENS / C4_MEDIAN_TOKENS) / 1.6448536269514722
    mean, second = math.exp(mu + sigma**2 / 2), math.exp(2 * mu + 2 * sigma**2)
    assert segment_mean_position(10**8) == pytest.approx((second + mean) / (2 * mean), rel=0.01)
    assert mean == pytest.approx(427, rel=0.01)  # C4.en: 156B tokens over 365M documents


def test_sequence_boundaries_cut_documents_and_the_mean_grows_with_the_sequence() -> None:
    means = [segment_mean_position(s) for s in (512, 1024, 2048, 4096, 8192, 65536)]
    assert all(a < b for a, b in zip(means, means[1:], strict=False))
    # one-token documents: every query attends to itself
    assert segment_mean_position(4096, median=1.0, p95=1.0001) == pytest.approx(1.0, rel=1e-3)


def test_a_block_sparse_kernel_computes_a_block_more_at_most_the_causal_prefix() -> None:
    for s in (64, 256, 4096, 8192):
        assert attended_keys(s) == pytest.approx(min((s + 1) / 2, segment_mean_position(s) + FLEX_BLOCK))
    assert attended_keys(64) == (64 + 1) / 2
    assert attended_keys(8192) == pytest.approx(segment_mean_position(8192) + FLEX_BLOCK)


def test_bad_document_statistics_raise() -> None:
    with pytest.raises(ValueError):
        segment_mean_position(0)
    with pytest.raises(ValueError):
        segment_mean_position(4096, median=500.0, p95=400.0)
    assert np.isfinite(segment_mean_position(1))
