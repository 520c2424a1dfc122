"""Input providers that read the step's rollouts themselves (some with forward passes of the
policy: ``entropy_profile``, ``context_gain``, and ``arena_rewards`` with the policy judge).

Each is registered in ``INPUT_PROVIDERS`` under the name a component lists in ``requires``
(:mod:`framework.rl.inputs`); the step calls it once per step, after scoring.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from framework.algorithms.advantages.arena import (
    ArenaAdvantageConfig,
    anchor_rewards,
    share_equal,
    single_elimination_rewards,
)
from framework.algorithms.advantages.hiper import HiPERAdvantageConfig
from framework.algorithms.advantages.info_reasoner import InfoReasonerConfig, reader_prompt
from framework.algorithms.advantages.r3 import R3AdvantageConfig, entropy_stats
from framework.config import ComponentConfig
from framework.registry import INPUT_PROVIDERS
from framework.registry.protocols import Tokenizer
from framework.rewards.text import normalize_answer, token_f1
from framework.rl.inputs import InputContext
from framework.training.scoring import scoring_row, teacher_forced


@INPUT_PROVIDERS.register("answers", config=ComponentConfig)
def answers_input(ctx: InputContext, *, cfg: ComponentConfig) -> list:
    """The ``answers`` input: per rollout its final answer, normalised as exact match normalises it
    (:func:`~framework.rewards.text.normalize_answer`); ``""`` for a rollout that gave none."""
    return [normalize_answer(t.answer) if t.answer is not None else "" for t in ctx.trajectories]


@INPUT_PROVIDERS.register("training_progress", config=ComponentConfig)
def training_progress_input(ctx: InputContext, *, cfg: ComponentConfig) -> float:
    """The ``training_progress`` input: the share of the run's steps done before this one (0 at
    the first step), one number for the whole batch, for components with a schedule."""
    return float(ctx.progress)


@INPUT_PROVIDERS.register("think_texts", config=ComponentConfig)
def think_texts_input(ctx: InputContext, *, cfg: ComponentConfig) -> list:
    """The ``think_texts`` input: per rollout the text of its ``<think>`` blocks, joined."""
    return [t.think_text for t in ctx.trajectories]


def reader_belief(
    policy: torch.nn.Module,
    tokenizer: Tokenizer,
    prompts: list[str],
    answers: list[str],
    *,
    pad_id: int,
    batch_size: int = 8,
) -> list[float]:
    """For each pair, the policy's probability of writing ``" " + answer`` right after ``prompt``
    (teacher-forced, no gradient): ``exp`` of the sum of the answer tokens' log-probs."""

    def ids(text: str) -> list[int]:
        return [int(x) for x in tokenizer.encode(text, add_special_tokens=False)]

    rows = [
        scoring_row(ids(prompt), ids(" " + answer))
        for prompt, answer in zip(prompts, answers, strict=True)
    ]
    out: list[float] = []
    with torch.no_grad():
        for chunk in teacher_forced(policy, rows, pad_id, batch_size=batch_size):
            out += chunk.logprobs.float().sum(-1).exp().tolist()
    return out


@INPUT_PROVIDERS.register("context_gain", config=InfoReasonerConfig)
def context_gain_input(ctx: InputContext, *, cfg: InfoReasonerConfig) -> Tensor:
    """The ``context_gain`` input (InfoReasoner's ``requires``): ``[N]`` the gain in the reader's
    belief in the gold answer (the largest over the question's gold answers,
    :func:`reader_belief` under the pre-update policy) from the rollout's retrieved text, joined
    by newlines (:func:`~framework.algorithms.advantages.info_reasoner.reader_prompt` with and without it);
    0 for a rollout that retrieved nothing or gave no answer."""
    trajs = ctx.trajectories
    prompts: list[str] = []
    answers: list[str] = []
    where: list[int] = []  # per prompt: its rollout's row, or -1 - question without context
    gained = [i for i, t in enumerate(trajs) if t.answer and any(u.evidence for u in t.turns)]
    for g in sorted({trajs[i].group for i in gained}):
        item = ctx.items[g]
        for gold in item.golden_answers:
            prompts.append(reader_prompt(item.question, None, cfg.max_context_words))
            answers.append(gold)
            where.append(-1 - g)
    for i in gained:
        item = ctx.items[trajs[i].group]
        evidence = "\n".join(u.evidence for u in trajs[i].turns if u.evidence)
        for gold in item.golden_answers:
            prompts.append(reader_prompt(item.question, evidence, cfg.max_context_words))
            answers.append(gold)
            where.append(i)
    beliefs = reader_belief(
        ctx.policy,
        ctx.tokenizer,
        prompts,
        answers,
        pad_id=ctx.pad_id,
        batch_size=cfg.probe_batch_size,
    )
    best: dict[int, float] = {}
    for key, b in zip(where, beliefs, strict=True):
        best[key] = max(best.get(key, 0.0), b)
    out = torch.zeros(len(trajs))
    for i in gained:
        out[i] = best[i] - best[-1 - trajs[i].group]
    return out


#: the policy judge's prompt (ArenaRL, ``judge=policy``): the continuations compared are " A", " B"
ARENA_PROMPT = (
    "Question: {question}\nAnswer A: {a}\nAnswer B: {b}\n"
    "Which answer is better, A or B? The better answer is"
)


def _policy_scores(ctx: InputContext, question: str, a: str, b: str) -> tuple[float, float]:
    """The policy judge's match scores of answers ``a`` and ``b``: after :data:`ARENA_PROMPT`, the
    probability of " A" among " A" and " B" with ``a`` shown first, plus that of " B" with the
    answers swapped (both orders summed, as the authors' judge sums them, which cancels a
    preference for a position); ``b`` scores 2 minus that."""
    tok = ctx.tokenizer

    def ids(text: str) -> list[int]:
        return [int(x) for x in tok.encode(text, add_special_tokens=False)]

    rows = []
    for first, second in ((a, b), (b, a)):
        prompt = ids(ARENA_PROMPT.format(question=question, a=first, b=second))
        rows += [scoring_row(prompt, ids(option)) for option in (" A", " B")]
    with torch.no_grad():
        (chunk,) = teacher_forced(ctx.policy, rows, ctx.pad_id)
    total = chunk.logprobs.float().sum(-1)  # [A|ab, B|ab, A|ba, B|ba]
    score = float(torch.sigmoid(total[0] - total[1]) + torch.sigmoid(total[3] - total[2]))
    return score, 2.0 - score


@INPUT_PROVIDERS.register("arena_rewards", config=ArenaAdvantageConfig)
def arena_rewards_input(ctx: InputContext, *, cfg: ArenaAdvantageConfig) -> Tensor:
    """The ``arena_rewards`` input (ArenaRL's ``requires``): ``[N]`` each rollout's ranking reward
    in ``[0, 1]`` from its group's tournament (``cfg.format``; :mod:`framework.algorithms.advantages.arena`),
    judged by ``cfg.judge``: ``rule`` (each answer's token F1 against the gold answers, -1 for no
    answer; with ``cfg.share_ties`` the rollouts of equal F1 share their mean reward) or
    ``policy`` (:func:`_policy_scores`; a rollout without an answer scores 0 against one with an
    answer, 1 against another without)."""
    trajs = ctx.trajectories
    out = torch.zeros(len(trajs))
    rank = single_elimination_rewards if cfg.format == "single_elimination" else anchor_rewards
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(trajs):
        groups.setdefault(t.group, []).append(i)
    for g, rows in groups.items():
        item = ctx.items[g]
        answers = [trajs[i].answer for i in rows]
        f1 = [token_f1(a, list(item.golden_answers)) if a else -1.0 for a in answers]

        def match(
            x: int, y: int, answers: list = answers, f1: list[float] = f1, q: str = item.question
        ) -> tuple[float, float]:
            a, b = answers[x], answers[y]
            if cfg.judge == "policy":
                if a and b:
                    return _policy_scores(ctx, q, a, b)
                return (2.0 * bool(a), 2.0 * bool(b)) if a or b else (1.0, 1.0)
            return f1[x], f1[y]

        rewards = rank(len(rows), match)
        if cfg.judge == "rule" and cfg.share_ties:
            rewards = share_equal(rewards, f1)
        for k, r in zip(rows, rewards, strict=True):
            out[k] = r
    return out


SWITCH = re.compile(r"<switch>\s*switch\s*</switch>", re.IGNORECASE)


@INPUT_PROVIDERS.register("switch_flags", config=HiPERAdvantageConfig)
def switch_flags_input(ctx: InputContext, *, cfg: HiPERAdvantageConfig) -> Tensor:
    """The ``switch_flags`` input: ``[N, T]`` bool, turn ``k`` of rollout ``i`` wrote
    ``<switch>SWITCH</switch>`` (HiPER's segment start); False past a rollout's turns."""
    trajs = ctx.trajectories
    width = max([len(t.turns) for t in trajs] + [1])
    out = torch.zeros((len(trajs), width), dtype=torch.bool)
    for i, t in enumerate(trajs):
        for k, turn in enumerate(t.turns):
            text = ctx.tokenizer.decode(
                t.token_ids[turn.start : turn.end], skip_special_tokens=False
            )
            out[i, k] = bool(SWITCH.search(text))
    return out


@INPUT_PROVIDERS.register("entropy_profile", config=R3AdvantageConfig)
def entropy_profile_input(ctx: InputContext, *, cfg: R3AdvantageConfig) -> Tensor:
    """The ``entropy_profile`` input: ``[N, 2]``, per rollout ``(E_peak, E_global)`` of the
    policy's next-token entropies over its trained tokens
    (:func:`~framework.algorithms.advantages.r3.entropy_stats` with ``cfg.peak_share``), eight rollouts
    per forward pass."""
    trajs = list(ctx.trajectories)
    out = torch.zeros((len(trajs), 2))
    ctx.policy.eval()
    for chunk in teacher_forced(ctx.policy, trajs, ctx.pad_id, batch_size=8, entropy=True):
        assert chunk.entropy is not None
        for j in range(chunk.entropy.shape[0]):
            values = chunk.entropy[j][chunk.batch.loss_mask[j].bool()].float()
            out[chunk.start + j] = torch.tensor(entropy_stats(values, cfg.peak_share))
    return out
