"""framework/training/scoring.py: teacher-forced scoring in chunks is scoring all rows at once."""

from __future__ import annotations

import torch

from framework.training.scoring import scoring_row, teacher_forced
from framework.training.tokens import pack, token_logprobs
from tests.unit.training.conftest import make_trajectories, tiny_policy  # noqa: F401  (fixture)


def test_scoring_row_masks_the_scored_tokens_only():
    row = scoring_row([5, 6, 7], [8, 9], question=2, group=1)
    assert row.token_ids == [5, 6, 7, 8, 9]
    assert row.loss_mask == [0, 0, 0, 1, 1]
    assert (row.prompt_len, row.question, row.group) == (3, 2, 1)


def test_chunks_cover_every_row_in_order_with_the_one_pass_numbers(tiny_policy):  # noqa: F811
    model, _ = tiny_policy
    model.eval()
    rows = make_trajectories(model.config.vocab_size)
    with torch.no_grad():
        whole, _ = token_logprobs(model, pack(rows, 0))
        chunks = list(teacher_forced(model, rows, 0, batch_size=4, entropy=True))
    assert [c.start for c in chunks] == [0, 4]
    assert all(c.entropy is not None for c in chunks)
    for c in chunks:
        for j in range(c.logprobs.shape[0]):
            mask = c.batch.loss_mask[j].bool()
            expected = whole[c.start + j][pack(rows, 0).loss_mask[c.start + j].bool()]
            torch.testing.assert_close(c.logprobs[j][mask], expected)
