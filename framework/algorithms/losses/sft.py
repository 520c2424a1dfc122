"""The supervised (cold-start) objective: next-token NLL on the assistant's own tokens."""

from __future__ import annotations

from torch import Tensor

from framework.algorithms.stats.aggregation import masked_mean


def sft_loss(logprobs: Tensor, mask: Tensor) -> Tensor:
    """Mean negative log-likelihood over the tokens where ``mask`` is 1.

    Args:
        logprobs: ``[N, L]`` log-probabilities of the target tokens.
        mask: ``[N, L]`` 1 on tokens the model should learn to write (assistant turns); 0 on the
            prompt, tool responses and padding, which then neither change the loss nor get gradient.

    Returns:
        A scalar (0 when nothing is masked in).
    """
    return -masked_mean(logprobs, mask)
