"""Samplers that learn from the rewards of earlier steps: VADE and XRPO-style rollout allocation.

Feedback: after each training step the trainer calls ``observe(step, questions, rewards, correct)``
with every group the step trained (all processes' groups under data parallelism). A step's draw must
not depend on when that call arrives (Lightning fetches step ``d + 1`` before step ``d`` trains), so
the rule is fixed: **the draw of step ``d`` uses the observations of steps ``<= d - 2``**, whether or
not later ones have arrived. The state is the draw count, the uniform walk's position and the log of
observations; :meth:`load_state_dict` rebuilds the posteriors by replaying the log, and the draw's
randomness is seeded by ``(seed, d)``, so a resumed run draws what the uninterrupted one drew.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from framework.config import Problem, check_range, option
from framework.registry.kinds import SAMPLERS
from framework.samplers.uniform import UniformSampler, UniformSamplerConfig
from framework.types import GroupRequest

LAG = 2  # the draw of step d uses observations of steps <= d - LAG


class _ObservingSampler(UniformSampler, ABC):
    """Shared machinery: the observation log, the lag rule, replay on load."""

    def __init__(self, questions: Sequence[Any], seed: int, *, cfg: Any) -> None:
        super().__init__(questions, seed, cfg=cfg)
        self.draws = 0
        self.log: list[dict[str, Any]] = []  # one entry per observed step, in step order
        self._applied = 0  # entries of the log folded into the statistics
        self.reset_statistics()

    # -- what subclasses define -------------------------------------------------------------------
    @abstractmethod
    def reset_statistics(self) -> None:
        """Empty statistics (before any observation)."""

    @abstractmethod
    def apply(self, entry: dict[str, Any]) -> None:
        """Fold one step's observations into the statistics."""

    @abstractmethod
    def choose(self, gen: torch.Generator) -> list[GroupRequest]:
        """This step's groups, from the statistics and ``gen`` (seeded by the draw)."""

    # -- the protocol -------------------------------------------------------------------------------
    def observe(
        self,
        step: int,
        questions: Sequence[int],
        rewards: Sequence[Sequence[float]],
        correct: Sequence[Sequence[bool]],
    ) -> None:
        """The outcome of step ``step``: per trained group its question (dataset row), its rollouts'
        rewards and whether each was correct. A step observed twice keeps its first record."""
        if any(e["step"] == step for e in self.log):
            return
        entry = {
            "step": int(step),
            "questions": [int(q) for q in questions],
            "rewards": [[float(r) for r in rs] for rs in rewards],
            "correct": [[bool(c) for c in cs] for cs in correct],
        }
        if self.log and step < self.log[-1]["step"]:
            raise ValueError(
                f"[sampler] observed step {step} after step {self.log[-1]['step']}; expected steps "
                "in order. Fix: call observe once per trained step, in training order."
            )
        self.log.append(entry)

    def next_groups(self) -> list[GroupRequest]:
        self.advance()  # the hop curriculum's stage (sampler.start_hops), if any
        d = self.draws
        self._catch_up(d - LAG)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + 7_777 + d)
        groups = self.choose(gen)
        self.draws += 1
        return groups

    def state_dict(self) -> dict[str, Any]:
        return dict(super().state_dict(), draws=self.draws, log=[dict(e) for e in self.log])

    def state_after(self, drawn: dict[str, Any]) -> dict[str, Any]:
        """``drawn`` (the state right after a step's draw) with every observation received so far
        of that step and the ones before it: what a checkpoint taken after training it resumes."""
        last = int(drawn["draws"]) - 1
        return dict(drawn, log=[dict(e) for e in self.log if e["step"] <= last])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.draws = int(state["draws"])
        self.log = [dict(e) for e in state.get("log", [])]
        self.reset_statistics()
        self._applied = 0
        self._catch_up(self.draws - 1 - LAG)  # the statistics as they stood after the last draw

    def _catch_up(self, last_step: int) -> None:
        """Fold the logged observations of steps ``<= last_step`` not folded in yet."""
        while self._applied < len(self.log) and self.log[self._applied]["step"] <= last_step:
            self.apply(self.log[self._applied])
            self._applied += 1


@dataclass
class VadeSamplerConfig(UniformSamplerConfig):
    prior_success: float = option(1.0, "Beta prior a (pseudo-successes)")
    prior_failure: float = option(1.0, "Beta prior b (pseudo-failures)")
    decay: float = option(
        0.9,
        "per observed step, every question's evidence shrinks towards the prior by "
        "this factor (the policy changes; old outcomes count less); 1 = never forget",
    )

    def problems(self) -> list[Problem]:
        out = super().problems()
        for name in ("prior_success", "prior_failure"):
            out += check_range(getattr(self, name), name, low=0.0, low_inclusive=False)
        return out + check_range(self.decay, "decay", low=0.0, high=1.0)


@SAMPLERS.register("vade", config=VadeSamplerConfig)
class VadeSampler(_ObservingSampler):
    """VADE-style variance-aware question selection (arXiv 2511.18902): a Beta posterior of each
    question's success rate; each step Thompson-samples ``p_q ~ Beta(a_q, b_q)`` for every question
    and trains the ``questions_per_step`` with the largest ``p_q (1 - p_q)`` (the variance of a
    rollout's outcome: a group of all-equal outcomes teaches a group-relative estimator nothing).

    Posterior: ``a_q = a0 + successes``, ``b_q = b0 + failures`` over the question's observed
    rollouts (correct by the reward's answer metric), and after every observed step each question's
    evidence decays towards the prior, ``a_q <- a0 + decay * (a_q - a0)`` (likewise ``b_q``), as the
    policy drifts. Unseen questions keep the prior (Beta(1, 1) is uniform, so they are explored).
    Choices made here where the paper's constants are loose: the prior, one decay (the paper has
    a two-scale prior decay) of 0.9 per observed step, top-k by sampled variance.
    """

    cfg: VadeSamplerConfig

    def reset_statistics(self) -> None:
        n = self.num_questions
        self.alpha = torch.full((n,), float(self.cfg.prior_success), dtype=torch.float64)
        self.beta = torch.full((n,), float(self.cfg.prior_failure), dtype=torch.float64)

    def apply(self, entry: dict[str, Any]) -> None:
        a0, b0, keep = self.cfg.prior_success, self.cfg.prior_failure, self.cfg.decay
        self.alpha = a0 + keep * (self.alpha - a0)
        self.beta = b0 + keep * (self.beta - b0)
        for q, cs in zip(entry["questions"], entry["correct"], strict=True):
            wins = sum(cs)
            self.alpha[q] += wins
            self.beta[q] += len(cs) - wins

    def choose(self, gen: torch.Generator) -> list[GroupRequest]:
        p = _beta_sample(self.alpha, self.beta, gen)
        pool = torch.tensor(self.pool)
        score = (p * (1 - p))[pool]  # only the questions the sampler may draw (sampler.max_hops)
        k = min(self.cfg.questions_per_step, len(self.pool))
        # ties (e.g. before any observation the scores are all random) broken by the sample itself
        rows = pool[torch.argsort(score, descending=True, stable=True)[:k]].tolist()
        if k < self.cfg.questions_per_step:  # more groups than questions: fill from the walk
            rows += self.walk.take(self.cfg.questions_per_step - k)
        return [GroupRequest(q, self.cfg.group_size) for q in rows]


def _beta_sample(a: torch.Tensor, b: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``Beta(a, b)`` draws from two Gamma draws (torch's Beta takes no generator)."""
    x, y = _gamma(a, gen), _gamma(b, gen)
    return x / (x + y)


def _gamma(shape: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Gamma(shape, 1) draws with Marsaglia and Tsang's method, seeded by ``gen``."""
    boost = shape < 1
    d = torch.where(boost, shape + 1, shape) - 1 / 3
    c = 1 / torch.sqrt(9 * d)
    out = torch.empty_like(shape)
    todo = torch.ones_like(shape, dtype=torch.bool)
    while todo.any():
        x = torch.randn(shape.shape, generator=gen, dtype=shape.dtype)
        u = torch.rand(shape.shape, generator=gen, dtype=shape.dtype)
        v = (1 + c * x) ** 3
        ok = (v > 0) & (
            torch.log(u.clamp_min(1e-300))
            < 0.5 * x**2 + d - d * v + d * torch.log(v.clamp_min(1e-300))
        )
        take = todo & ok
        out[take] = (d * v)[take]
        todo &= ~ok
    u = torch.rand(shape.shape, generator=gen, dtype=shape.dtype)
    return torch.where(boost, out * u.clamp_min(1e-300) ** (1 / shape), out)


@dataclass
class XrpoSamplerConfig(UniformSamplerConfig):
    extra_rollouts: int = option(
        8, "rollouts per step beyond questions_per_step x group_size, allocated"
    )
    max_group_size: int = option(16, "most rollouts one group may get")
    prior_std: float = option(
        0.5, "reward std assumed for a question with fewer than 2 observed rollouts"
    )

    def problems(self) -> list[Problem]:
        out = super().problems() + check_range(self.extra_rollouts, "extra_rollouts", low=0)
        out += check_range(self.max_group_size, "max_group_size", low=self.group_size)
        return out + check_range(self.prior_std, "prior_std", low=0.0)


@SAMPLERS.register("xrpo", config=XrpoSamplerConfig)
class XrpoSampler(_ObservingSampler):
    """XRPO-style rollout allocation (arXiv 2510.06672): questions are walked as by ``uniform``;
    each step's ``extra_rollouts`` go, one at a time, to the drawn question whose mean-reward
    confidence interval would shrink most from one more rollout.

    With ``n`` rollouts of the question so far (observed earlier plus those already given it this
    step) and its observed reward std ``s`` (``prior_std`` below two observations), one more rollout
    shrinks the half-width ``s / sqrt(n)`` by ``s * (1/sqrt(n) - 1/sqrt(n + 1))``; ties go to the
    earlier question of the step. The paper's half-width is Student's ``t_{1-a/2, n-1} s / sqrt(n)``
    plus an exploration bonus; here the quantile is taken as constant (it only rescales every gain
    at large ``n``) and there is no bonus, so the allocation is the paper's at large ``n``. Only the
    allocation is here: XRPO's in-context seeding and its advantage sharpening are not.
    """

    cfg: XrpoSamplerConfig

    def reset_statistics(self) -> None:
        self.count: dict[int, int] = {}
        self.total: dict[int, float] = {}
        self.squares: dict[int, float] = {}

    def apply(self, entry: dict[str, Any]) -> None:
        for q, rs in zip(entry["questions"], entry["rewards"], strict=True):
            self.count[q] = self.count.get(q, 0) + len(rs)
            self.total[q] = self.total.get(q, 0.0) + sum(rs)
            self.squares[q] = self.squares.get(q, 0.0) + sum(r * r for r in rs)

    def reward_std(self, q: int) -> float:
        n = self.count.get(q, 0)
        if n < 2:
            return self.cfg.prior_std
        mean = self.total[q] / n
        var = max(self.squares[q] / n - mean * mean, 0.0) * n / (n - 1)
        return math.sqrt(var)

    def choose(self, gen: torch.Generator) -> list[GroupRequest]:
        cfg = self.cfg
        rows = self.walk.take(cfg.questions_per_step)
        sizes = [cfg.group_size] * len(rows)
        for _ in range(cfg.extra_rollouts):
            best, gain = None, 0.0
            for i, q in enumerate(rows):
                if sizes[i] >= cfg.max_group_size:
                    continue
                n = self.count.get(q, 0) + sizes[i]
                g = self.reward_std(q) * (1 / math.sqrt(n) - 1 / math.sqrt(n + 1))
                if best is None or g > gain:
                    best, gain = i, g
            if best is None:
                break
            sizes[best] += 1
        return [GroupRequest(q, s) for q, s in zip(rows, sizes, strict=True)]
