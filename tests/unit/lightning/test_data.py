"""The data module resumes after the last trained step, not after the batch Lightning prefetched."""

from __future__ import annotations

from framework.data.schema import QAItem
from framework.rl.data import QuestionDataModule
from framework.samplers.uniform import UniformSampler, UniformSamplerConfig


def _module(seed=0):
    items = [QAItem(f"q{i}", f"question {i}", (str(i),), None, None, None, "t") for i in range(7)]
    sampler = UniformSampler(
        items, seed, cfg=UniformSamplerConfig(name="uniform", questions_per_step=3, group_size=2)
    )
    return QuestionDataModule(items, items[:5], sampler, max_steps=10, val_questions=3, seed=seed)


def _questions(batch):
    return [g.question for g in batch.groups]


def test_resume_continues_with_the_step_after_the_last_trained_one():
    dm = _module()
    it = iter(dm.train_dataloader())
    steps = [next(it) for _ in range(5)]
    dm.mark_trained(steps[1])  # trained two steps; Lightning already fetched more
    state = dm.state_dict()

    fresh = _module()
    fresh.load_state_dict(state)
    resumed = iter(fresh.train_dataloader())
    assert [_questions(next(resumed)) for _ in range(3)] == [_questions(s) for s in steps[2:]]


def test_validation_subset_is_fixed_by_the_seed():
    rows = next(iter(_module(seed=1).val_dataloader()))
    assert len(rows) == 3 and len(set(rows)) == 3 and max(rows) < 5
    assert rows == next(iter(_module(seed=1).val_dataloader()))


def test_reserve_groups_are_shared_out_like_the_step_groups():
    from framework.types import GroupRequest

    dm = _module()

    class Trainer:
        world_size, global_rank = 2, 1

    dm.trainer = Trainer()
    groups = [GroupRequest(q, 2) for q in (0, 1, 2)] + [
        GroupRequest(q, 2, reserve=True) for q in (3, 4, 5)
    ]
    assert [(g.question, g.reserve) for g in dm.shard(groups)] == [(1, False), (4, True)]
