"""The built-in rollout augmenters (:mod:`framework.rl.augment`): what SPO and HiPER (``mc_values``),
S-GRPO (``early_exits``), R³ (``replay_reflect``) and HiLL (``hints``) roll out besides the step's
groups. The formulas that use their rollouts are pure functions in :mod:`framework.algorithms`
(``segment_values``, ``early_exit``, ``replay``, ``hints``), whose docstrings list every choice.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch

from framework.algorithms.rewards.hints import hint_reward
from framework.algorithms.stats.group import group_mean
from framework.config import Problem, check, check_choice, check_range, option
from framework.data.schema import QAItem
from framework.registry import AUGMENTERS
from framework.rewards.entity_match import EntityRule, hidden_entities
from framework.rewards.text import normalize_answer
from framework.rl.augment import AugmentContext, Augmented, Augmenter, AugmenterConfig, with_extras
from framework.rl.drawn import Drawn
from framework.rollout.engine import Prefix
from framework.rollout.policy import chat_prompt_ids
from framework.rollout.records import trajectory_from_state, trajectory_state
from framework.training.scoring import teacher_forced
from framework.types import STATUS_OVER_BUDGET, Trajectory


def groups_of(drawn: Drawn) -> list[list[int]]:
    """Per group of ``drawn``, the rows of its rollouts in order."""
    rows: list[list[int]] = [[] for _ in drawn.items]
    for i, t in enumerate(drawn.trajectories):
        rows[t.group].append(i)
    return rows


def open_boundaries(t: Trajectory) -> list[int]:
    """The turn counts ``k >= 1`` after which ``t`` can be continued (turn ``k`` had a tool
    response), in order."""
    return [k for k in range(1, len(t.turns) + 1) if t.turns[k - 1].observation is not None]


# -- SPO, HiPER: Monte-Carlo values at turn boundaries ---------------------------------------------
@dataclass
class MCValuesConfig(AugmenterConfig):
    provides: ClassVar[tuple[str, ...]] = ("boundary_values",)
    paper: ClassVar[str] = "SPO (arXiv 2505.23564), chain variant with turn segments"
    fidelity: ClassVar[str] = "partial"
    continuations: int = option(4, "choice: continuations rolled out from each turn boundary")

    def problems(self) -> list[Problem]:
        return check_range(self.continuations, "continuations", low=1)


@AUGMENTERS.register("mc_values", config=MCValuesConfig)
class MCValues(Augmenter[MCValuesConfig]):
    """``boundary_values [N, W]``: ``V(s_k)`` of each rollout's state after ``k`` turns, the mean
    reward of ``continuations`` rollouts continued from it by the current policy
    (:func:`framework.algorithms.advantages.spo.spo_advantage` reads it). Column 0 is the group's
    mean reward, column ``T_i`` and the columns past it the rollout's own reward; a boundary after
    a turn without a tool response (a rollout that ended) keeps the rollout's reward. The trained
    rollouts are the step's own; the continuations are only scored."""

    def augment(self, drawn: Drawn, ctx: AugmentContext) -> Augmented:
        trajs, total = drawn.trajectories, drawn.scores.total.to(torch.get_default_dtype())
        width = max([len(t.turns) for t in trajs] + [0]) + 1
        values = total.unsqueeze(-1).repeat(1, width)  # [N, W]
        if trajs:
            group = torch.tensor([t.group for t in trajs], dtype=torch.long)
            values[:, 0] = group_mean(total, group)
        m = self.cfg.continuations
        prefixes, where = [], []
        for i, t in enumerate(trajs):
            for k in open_boundaries(t):
                if k < len(t.turns):  # after the last turn: the rollout's own reward
                    for _ in range(m):
                        prefixes.append(Prefix(t, k, group=t.group))
                        where.append((i, k))
        conts = ctx.run_from(prefixes)
        if conts:
            rewards = ctx.score(conts, drawn.items).total.tolist()
            sums: dict[tuple[int, int], float] = {}
            for key, r in zip(where, rewards, strict=True):
                sums[key] = sums.get(key, 0.0) + r
            for (i, k), s in sums.items():
                values[i, k] = s / m
        figures = {"boundaries": float(len(where) // m), "continuations_per_boundary": float(m)}
        return Augmented(with_extras(drawn, boundary_values=values), figures)


# -- S-GRPO: early exits ----------------------------------------------------------------------------
@dataclass
class EarlyExitsConfig(AugmenterConfig):
    provides: ClassVar[tuple[str, ...]] = ("exit_position", "exit_correct")
    paper: ClassVar[str] = "S-GRPO: serial-group decaying reward, arXiv 2505.07686"
    fidelity: ClassVar[str] = "exact"
    forced: str = option(
        "<answer>", "choice: text forced after a tool response to make the policy answer"
    )

    def problems(self) -> list[Problem]:
        return check(
            bool(self.forced.strip()),
            "forced",
            self.forced,
            "non-empty text",
            "keep the default '<answer>'",
        )


@AUGMENTERS.register("early_exits", config=EarlyExitsConfig)
class EarlyExits(Augmenter[EarlyExitsConfig]):
    """Each rollout becomes a serial group: its early exits (after each tool response, ``forced``
    then one answer turn) and itself, ordered by turns kept (``exit_position``), with each exit's
    correctness by the reward's answer metric (``exit_correct``); see
    :mod:`framework.algorithms.advantages.s_grpo`."""

    def augment(self, drawn: Drawn, ctx: AugmentContext) -> Augmented:
        if not drawn.trajectories:  # a step that kept no group
            return Augmented(drawn)
        prefixes = [
            Prefix(t, k, group=i, forced=self.cfg.forced, max_new_turns=1)
            for i, t in enumerate(drawn.trajectories)
            for k in open_boundaries(t)
            if k < len(t.turns)  # the rollout itself is its last exit
        ]
        exits = ctx.run_from(prefixes)
        trajs: list[Trajectory] = []
        items: list[QAItem] = []
        position: list[int] = []
        by_source: dict[int, list[Trajectory]] = {}
        for p, e in zip(prefixes, exits, strict=True):
            by_source.setdefault(p.group, []).append(e)
        for i, t in enumerate(drawn.trajectories):
            serial = [*by_source.get(i, []), t]
            for k, e in enumerate(serial):
                trajs.append(replace(e, group=i))
                position.append(k)
            items.append(drawn.items[t.group])
        scores = ctx.score(trajs, items)
        right = torch.tensor(ctx.correct(trajs, items), dtype=torch.bool)
        out = with_extras(
            Drawn(trajs, items, scores),
            exit_position=torch.tensor(position, dtype=torch.long),
            exit_correct=right,
        )
        figures = {
            "exits": float(len(exits)),
            "exit_accuracy": float(right.float().mean()) if len(trajs) else 0.0,
        }
        return Augmented(out, figures)


# -- R³: replay and reflection ----------------------------------------------------------------------
REFLECTION = (
    "{question}\n\nAn earlier attempt at this question was wrong:\n{attempt}\n\n"
    "Find where it went wrong, search again and give a different, correct answer."
)


@dataclass
class ReplayReflectConfig(AugmenterConfig):
    provides: ClassVar[tuple[str, ...]] = ("replayed", "reflected")
    paper: ClassVar[str] = "R3: replay, reflection and ranking rewards, arXiv 2601.19620"
    fidelity: ClassVar[str] = "partial"
    replay: bool = option(True, "CCR: add stored opposite outcomes")
    replays: int = option(1, "choice: k, stored rollouts added to a one-outcome group")
    reflect: bool = option(True, "ISR: reflected groups of hard queries")
    hard_below: float = option(
        0.2, "choice: tau, a question whose earlier mean correctness is below is hard"
    )
    reflection_group: int = option(
        0, "rollouts of a reflected prompt; 0: as many as the question's group"
    )
    keep: int = option(4, "choice: stored rollouts per question and outcome (newest)")
    max_attempt_chars: int = option(600, "choice: the shown failed attempt is cut to this")
    prompt: str = option(REFLECTION, "choice: the reflection prompt p_r ({question}, {attempt})")

    def problems(self) -> list[Problem]:
        out = check_range(self.replays, "replays", low=1)
        out += check_range(self.hard_below, "hard_below", low=0.0, high=1.0)
        out += check_range(self.reflection_group, "reflection_group", low=0)
        out += check_range(self.keep, "keep", low=1)
        out += check_range(self.max_attempt_chars, "max_attempt_chars", low=1)
        try:
            self.prompt.format(question="", attempt="")
            fields = "{question}" in self.prompt and "{attempt}" in self.prompt
        except (KeyError, IndexError, ValueError):
            fields = False  # another {field}, or a stray brace
        out += check(
            fields,
            "prompt",
            self.prompt,
            "text with {question} and {attempt} and no other {field}",
            "write both fields; double a literal brace ({{ or }})",
        )
        return out


@dataclass
class QuestionMemory:
    """What R³'s buffer holds for one question: how many of its rollouts were drawn at earlier
    steps and how many of those were correct, and the newest stored rollouts of each outcome
    (newest first)."""

    seen: int = 0
    correct: int = 0
    stored: dict[bool, list[Trajectory]] = field(default_factory=lambda: {True: [], False: []})


def attempt_text(t: Trajectory, max_chars: int) -> str:
    """A failed rollout as a reflection prompt shows it (``o_h``): its reasoning and its answer,
    the reasoning cut from the front to fit ``max_chars``."""
    answer = f"Answer: {t.answer}" if t.answer is not None else "Answer: (none)"
    room = max(max_chars - len(answer) - 1, 0)
    think = t.think_text.strip()
    if len(think) > room:
        think = "..." + think[len(think) - max(room - 3, 0) :] if room > 3 else ""
    return f"{think}\n{answer}" if think else answer


@AUGMENTERS.register("replay_reflect", config=ReplayReflectConfig)
class ReplayReflect(Augmenter[ReplayReflectConfig]):
    """R³'s cross-context replay and in-context self-reflection
    (:mod:`framework.algorithms.advantages.r3`, parts 1 and 2): a group whose rollouts share one outcome
    gets up to ``replays`` stored rollouts of the other added; a hard question (earlier mean
    correctness below ``hard_below``) gets a new group for its reflected prompt. The buffer (per
    question, counts and the newest ``keep`` rollouts of each outcome, from earlier steps) is this
    augmenter's state, saved in checkpoints. The step's rewards are recomputed over the new
    batch."""

    def __init__(self, *, cfg: ReplayReflectConfig) -> None:
        super().__init__(cfg=cfg)
        self.buffer: dict[int, QuestionMemory] = {}
        self.steps = 0

    def augment(self, drawn: Drawn, ctx: AugmentContext) -> Augmented:
        cfg = self.cfg
        trajs = list(drawn.trajectories)
        right = ctx.correct(trajs, drawn.items)
        items = list(drawn.items)
        out: list[Trajectory] = []
        replayed: list[bool] = []
        reflect: list[tuple[str, int, int, QAItem]] = []  # prompt, size, question id, item
        rng = random.Random(self.steps)
        for g, rows in enumerate(groups_of(drawn)):
            out += [trajs[i] for i in rows]
            replayed += [False] * len(rows)
            if not rows:
                continue
            q = trajs[rows[0]].question
            memory = self.buffer.get(q)  # earlier steps only (Algorithm 1 updates it last)
            if memory is None:
                continue
            outcomes = {right[i] for i in rows}
            if cfg.replay and len(outcomes) == 1:
                other = memory.stored[not next(iter(outcomes))][: cfg.replays]
                out += [replace(t, group=g) for t in other]
                replayed += [True] * len(other)
            failed = memory.stored[False]
            if cfg.reflect and failed and memory.correct < cfg.hard_below * memory.seen:
                shown = attempt_text(rng.choice(failed), cfg.max_attempt_chars)
                text = cfg.prompt.format(question=items[g].question, attempt=shown)
                reflect.append((text, cfg.reflection_group or len(rows), q, items[g]))
        self._remember(drawn, right)
        reflected = [False] * len(out)
        if reflect:
            new = ctx.run([r[0] for r in reflect], [r[1] for r in reflect], [r[2] for r in reflect])
            out += [replace(t, group=len(drawn.items) + t.group) for t in new]
            items += [r[3] for r in reflect]
            replayed += [False] * len(new)
            reflected += [True] * len(new)
        changed = any(replayed) or any(reflected)
        scores = ctx.score(out, items) if changed else drawn.scores
        batch = with_extras(
            Drawn(out if changed else trajs, items, scores),
            replayed=torch.tensor(replayed, dtype=torch.bool),
            reflected=torch.tensor(reflected, dtype=torch.bool),
        )
        figures = {
            "replayed": float(sum(replayed)),
            "reflected": float(sum(reflected)),
            "reflected_groups": float(len(reflect)),
        }
        return Augmented(batch, figures)

    def _remember(self, drawn: Drawn, right: Sequence[bool]) -> None:
        """Adds this step's on-policy rollouts to the buffer (Algorithm 1 line 11); one over its
        budget counts toward the question's mean but is not stored."""
        self.steps += 1
        for i, t in enumerate(drawn.trajectories):
            memory = self.buffer.setdefault(t.question, QuestionMemory())
            memory.seen += 1
            memory.correct += int(right[i])
            if t.status == STATUS_OVER_BUDGET:
                continue  # counted, not stored: the step never trains it, so nor may a replay
            kept = memory.stored[bool(right[i])]
            kept.insert(0, t)
            del kept[self.cfg.keep :]

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "buffer": {
                str(q): {
                    "seen": m.seen,
                    "correct": m.correct,
                    "stored": {
                        str(int(k)): [trajectory_state(t) for t in ts] for k, ts in m.stored.items()
                    },
                }
                for q, m in self.buffer.items()
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.steps = int(state.get("steps", 0))
        self.buffer = {}
        for q, m in state.get("buffer", {}).items():
            if "stored" not in m:
                raise ValueError(
                    f"[augment.replay_reflect] got a checkpoint buffer of an older format "
                    f"(keys {sorted(m)}); expected seen, correct and stored. Fix: start this run "
                    "afresh (the buffer format changed when R³ was read from its paper)."
                )
            self.buffer[int(q)] = QuestionMemory(
                seen=int(m["seen"]),
                correct=int(m["correct"]),
                stored={
                    bool(int(k)): [trajectory_from_state(t) for t in ts]
                    for k, ts in m["stored"].items()
                },
            )


# -- HiLL: hinted groups for all-wrong questions ----------------------------------------------------
HINTER_PROMPT = (
    "A student failed this question.\nQuestion: {question}\nStudent's answer: {failed}\n"
    "Reference answer: {answer}\nWrite one short hint that helps the student find the answer "
    "without saying it. Hint:"
)


@dataclass
class HintsConfig(AugmenterConfig):
    provides: ClassVar[tuple[str, ...]] = ("hinted",)
    paper: ClassVar[str] = "HiLL: Learning to Hint, arXiv 2604.00698"
    fidelity: ClassVar[str] = "partial"
    source: str = option(
        "chain",
        "who writes hints: chain (the question's hidden entities, a fixed-hint "
        "baseline) or policy (the policy, prompted as a hinter; not trained)",
    )
    hints: int = option(4, "hints per all-wrong question (paper M = 4)")
    rollouts: int = option(8, "hinted rollouts per hint (paper n = 8)")
    temperature: float = option(0.3, "T of the reliance weight")
    max_hint_chars: int = option(200, "a longer hint is gated")
    max_hint_tokens: int = option(48, "tokens of a policy-written hint")
    template: str = option(
        "{question}\nHint: {hint}", "choice: the hinted question ({question}, {hint})"
    )

    def problems(self) -> list[Problem]:
        out = check_choice(self.source, "source", ("chain", "policy"))
        out += check_range(self.hints, "hints", low=1)
        out += check_range(self.rollouts, "rollouts", low=2)
        out += check_range(self.temperature, "temperature", low=0.0, low_inclusive=False)
        out += check_range(self.max_hint_chars, "max_hint_chars", low=1)
        out += check_range(self.max_hint_tokens, "max_hint_tokens", low=1)
        ok = "{question}" in self.template and "{hint}" in self.template
        out += check(
            ok, "template", self.template, "text with {question} and {hint}", "add both fields"
        )
        return out


def chain_hints(item: QAItem, count: int) -> list[str]:
    """Up to ``count`` hints naming an entity of the question's chain that the question does not
    name and that is not a gold answer (its bridge entities), in chain order."""
    if not item.entities:
        return []
    answers = {normalize_answer(a) for a in item.golden_answers}
    out = []
    for e in hidden_entities(item.question, item.entities, _HIDDEN_RULE):
        name = e if isinstance(e, str) else e[0]
        if normalize_answer(name) not in answers:
            out.append(f"The answer is connected to {name}.")
    return out[:count]


def hint_gate(hint: str, golden_answers: Sequence[str], max_chars: int) -> str:
    """Why a hint is refused (``"leak"``, ``"overlong"``, ``"empty"``), or ``""``: it leaks when
    its normalised text contains a normalised gold answer as whole words."""
    text = normalize_answer(hint)
    if not text:
        return "empty"
    if len(hint) > max_chars:
        return "overlong"
    padded = f" {text} "
    for answer in golden_answers:
        a = normalize_answer(answer)
        if a and f" {a} " in padded:
            return "leak"
    return ""


#: how chain hints find the entities a question names: any alias, case- and punctuation-blind
_HIDDEN_RULE = EntityRule(aliases=True, lowercase=True, strip_punctuation=True)


@AUGMENTERS.register("hints", config=HintsConfig)
class Hints(Augmenter[HintsConfig]):
    """HiLL (:mod:`framework.algorithms.rewards.hints`), partial: for each all-wrong group, ``hints``
    hints (from the question's chain, or written by the policy as a hinter, which is not trained:
    the paper trains a second model with PPO on the hint rewards), ``rollouts`` rollouts of the
    hinted question per hint, each hint scored by ``R_hint``; the best hint with ``R_hint > 0``
    puts its hinted rollouts in place of the group's (as many as the group has; trained with the
    hint in their prompt). Gated hints (leak, overlong, empty) are dropped: their -0.2 matters to a
    trained hinter only."""

    def augment(self, drawn: Drawn, ctx: AugmentContext) -> Augmented:
        right = ctx.correct(drawn.trajectories, drawn.items)
        trajs = list(drawn.trajectories)
        hinted = [False] * len(trajs)
        tried = replaced = gated = 0
        best_rewards: list[float] = []
        for g, rows in enumerate(groups_of(drawn)):
            if not rows or any(right[i] for i in rows):
                continue
            item = drawn.items[g]
            candidates = self._hints(item, trajs[rows[0]], ctx)
            ok = [
                h
                for h in candidates
                if not hint_gate(h, item.golden_answers, self.cfg.max_hint_chars)
            ]
            gated += len(candidates) - len(ok)
            tried += 1
            best: tuple[float, list[Trajectory]] | None = None
            for hint in ok:
                text = self.cfg.template.format(question=item.question, hint=hint)
                new = ctx.run([text], [self.cfg.rollouts], [trajs[rows[0]].question])
                good = ctx.correct(new, [item])  # one question: every rollout is group 0
                reliance = self._reliance(ctx, item, [t for t, c in zip(new, good) if c])
                r = hint_reward(good, reliance, temperature=self.cfg.temperature)
                if r > 0 and (best is None or r > best[0]):
                    best = (r, new)
            if best is None:
                continue
            best_rewards.append(best[0])
            replaced += 1
            for i, t in zip(rows, best[1], strict=False):
                trajs[i] = replace(t, group=g)
                hinted[i] = True
        scores = ctx.score(trajs, drawn.items) if replaced else drawn.scores
        out = with_extras(Drawn(trajs, drawn.items, scores), hinted=torch.tensor(hinted))
        figures = {
            "hinted_questions": float(tried),
            "replaced_groups": float(replaced),
            "gated_hints": float(gated),
        }
        if best_rewards:
            figures["hint_reward"] = sum(best_rewards) / len(best_rewards)
        return Augmented(out, figures)

    def _hints(self, item: QAItem, failed: Trajectory, ctx: AugmentContext) -> list[str]:
        if self.cfg.source == "chain":
            return chain_hints(item, self.cfg.hints)

        text = HINTER_PROMPT.format(
            question=item.question,
            failed=failed.answer or "(no answer)",
            answer=item.golden_answers[0],
        )
        ids = chat_prompt_ids(ctx.tokenizer, [{"role": "user", "content": text}])
        with torch.no_grad():
            outs = ctx.loop.generate(
                [ids] * self.cfg.hints, [self.cfg.max_hint_tokens] * self.cfg.hints, ["\n\n"]
            )
        return [ctx.tokenizer.decode(o.token_ids, skip_special_tokens=True).strip() for o in outs]

    def _reliance(
        self, ctx: AugmentContext, item: QAItem, hinted: Sequence[Trajectory]
    ) -> list[float]:
        """Per correct hinted rollout: mean log-prob of its response without the hint minus
        with it (the response tokens under the plain question's prompt)."""
        if not hinted:
            return []
        plain = ctx.loop.prompt_ids(item.question)
        bare = [
            replace(
                t,
                token_ids=plain + t.token_ids[t.prompt_len :],
                loss_mask=[0] * len(plain) + t.loss_mask[t.prompt_len :],
                prompt_len=len(plain),
            )
            for t in hinted
        ]
        pad = ctx.tokenizer.pad_token_id or 0
        ctx.policy.eval()
        with torch.no_grad():
            with_hint = _mean_logprobs(ctx.policy, hinted, pad)
            without = _mean_logprobs(ctx.policy, bare, pad)
        return [a - b for a, b in zip(without, with_hint, strict=True)]


def _mean_logprobs(
    policy: torch.nn.Module, trajs: Sequence[Trajectory], pad_id: int
) -> list[float]:
    """Per rollout, the mean log-prob of its trained tokens under ``policy``."""
    (chunk,) = teacher_forced(policy, trajs, pad_id)
    logp = chunk.logprobs
    mask = chunk.batch.loss_mask.to(logp.dtype)
    return (logp.float() * mask).sum(-1).div(mask.sum(-1).clamp(min=1)).tolist()
