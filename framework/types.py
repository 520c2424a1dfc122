"""Types shared across layers: the config base every component derives from, the batch each
component kind receives, and the records they carry (trajectories, generations, retrieved text).

Shapes: ``N`` rollouts in the batch (all groups concatenated), ``L`` padded response length. In the
``[N, L]`` tensors of :class:`AdvantageInputs`, column ``j`` of row ``i`` is the ``j``-th response
token of rollout ``i`` (the first token after its prompt); rows shorter than ``L`` are padded on the
right.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, overload

from omegaconf import MISSING
from torch import Tensor

from framework.problems import Problem

_T = TypeVar("_T")


@overload
def option(default: _T, help: str) -> _T: ...
@overload
def option(*, default_factory: Callable[[], _T], help: str) -> _T: ...
def option(default: Any = NO_DEFAULT, help: str = "", *, default_factory: Any = NO_DEFAULT) -> Any:
    """A config field that carries its help text (seekrl-components, the registry table, Hydra).

    ``x: float = option(0.2, "clip range")`` is ``field(default=0.2, metadata={"help": "clip
    range"})``; a mutable default takes ``default_factory`` instead, as with ``field``.
    """
    if default_factory is not NO_DEFAULT:
        return field(default_factory=default_factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


#: a rollout's outcome: answered within the format, broke it, or ran out of budget (turns, tool
#: calls, tokens); the one table of statuses the engine, rewards, metrics and evaluation read
Status = Literal["ok", "format_error", "over_budget"]
STATUS_OK: Status = "ok"
STATUS_FORMAT_ERROR: Status = "format_error"
STATUS_OVER_BUDGET: Status = "over_budget"
STATUSES: tuple[Status, ...] = (STATUS_OK, STATUS_FORMAT_ERROR, STATUS_OVER_BUDGET)


@dataclass
class ComponentConfig:
    """Base for the typed config of a registered component.

    ``name`` is the registry key; registration fills it in, so ``advantage=rloo`` on the command line
    selects both the code and this schema. Subclasses add fields with defaults (paper values) and may
    override :meth:`problems` to report invalid values; paths there are relative to the component
    (``clip_low``), the validator prefixes the section (``loss.clip_low``).

    ``requires`` names the inputs an advantage estimator needs beyond what every step computes
    (for example ``("answer_probs",)``): each is computed by the input provider registered under
    that name in ``INPUT_PROVIDERS`` and handed over in ``AdvantageInputs.extras``, so an
    estimator that needs something new brings its provider instead of editing the training step
    (:mod:`framework.rl.inputs`).

    ``paper`` and ``fidelity`` say where a method comes from and how closely it follows it;
    seekrl-components prints both, so a result of a reconstructed method is not read as the paper's.
    """

    requires: ClassVar[tuple[str, ...]] = ()
    #: the method's paper (for example ``"COPO, arXiv 2508.04138"``), listed by seekrl-components
    paper: ClassVar[str] = ""
    #: how the formula was obtained: ``"exact"`` (the paper's text or its authors' code),
    #: ``"partial"`` (the core exact, named pieces chosen here) or ``"reconstructed"`` (from the
    #: abstract: every constant is a choice written in the docstring); ``""`` when not stated
    fidelity: ClassVar[str] = ""

    name: str = option(MISSING, "registry key of the component")

    def problems(self) -> list[Problem]:
        """Every invalid value of this config (empty when valid)."""
        return []


@dataclass(frozen=True)
class GroupRequest:
    """One group to roll out: a question (dataset row) and how many rollouts it gets.

    A ``reserve`` group is rolled out only to replace a group the sampler's ``keep_group`` dropped
    (dynamic sampling); a reserve not needed is skipped.
    """

    question: int
    size: int
    reserve: bool = False


@dataclass(frozen=True)
class ToolCall:
    """A valid call: ``search`` with ``queries``, or ``visit`` with ``doc_id`` or ``title``."""

    name: str
    queries: tuple[str, ...] = ()
    doc_id: str | None = None
    title: str | None = None
    goal: str | None = None


@dataclass(frozen=True)
class TurnSpan:
    """One model turn of a rollout: its tokens, the tool calls it made and the observation after it.

    Positions are ``[start, end)`` token indices: of ``Trajectory.token_ids`` on a trajectory, of
    the response (the columns of the ``[N, L]`` tensors) in :class:`AdvantageInputs`.

    Attributes:
        start: first token the model generated in this turn.
        end: one past its last generated token.
        calls: the valid tool calls the turn made, in order, each answered in ``observation``.
        invalid_calls: tool calls too malformed to run (each answered with an error message).
        observation: ``(start, end)`` of the tool response appended after the turn (loss mask 0),
            ``None`` when none was (an answer, or the rollout ended).
        observation_digest: a short hash of that tool response's text (``""`` when none): equal
            digests mean the same observation, what an anchor state that compares observations
            rather than calls needs (``advantage.state_key=observations``).
        evidence: the retrieved text within that tool response, as the tools reported it
            (:class:`~framework.rollout.tools.ToolResult`): passages and pages, none of the
            model's own words (query echoes, error messages); ``""`` when none.
    """

    start: int
    end: int
    calls: tuple[ToolCall, ...] = ()
    invalid_calls: int = 0
    observation: tuple[int, int] | None = None
    observation_digest: str = ""
    evidence: str = ""

    @staticmethod
    def digest(text: str) -> str:
        """The :attr:`observation_digest` of a tool response's text (16 hex digits of BLAKE2b)."""
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def shifted(self, offset: int) -> TurnSpan:
        """The same turn with every position moved by ``offset``."""
        obs = self.observation
        return TurnSpan(
            self.start + offset,
            self.end + offset,
            self.calls,
            self.invalid_calls,
            None if obs is None else (obs[0] + offset, obs[1] + offset),
            self.observation_digest,
            self.evidence,
        )


@dataclass
class AdvantageInputs:
    """Inputs of an advantage estimator: the rewards, and everything the trainer knows per rollout.

    Estimators return ``[N]`` (one advantage per rollout, spread over its trained tokens) or
    ``[N, L]`` (one per response token, in the layout of ``token_mask``).

    Attributes:
        rewards: ``[N]`` float scalar reward per rollout.
        group_index: ``[N]`` int; rollouts with equal values belong to one group (one question).
            Values need not be contiguous and groups may differ in size.
        token_mask: ``[N, L]`` bool, 1 on the response tokens the policy generated (tool responses
            and padding are 0); ``L`` is the longest response of the batch. ``None`` only where a
            caller has no token structure (then return ``[N]``).
        sample_mask: ``[N]`` bool, 0 on rollouts left out of the loss (over budget, with
            ``optim.over_budget=drop``); ``None`` = all.
        turn_index: ``[N, L]`` int, the model turn each response token belongs to (a tool response
            belongs to the turn that called it); -1 on padding.
        turns: per rollout its model turns (:class:`TurnSpan`, response positions): turn
            boundaries, tool calls with their queries, observation spans.
        stats: per rollout the agent loop's counters (``turns``, ``tool_calls``, ``queries``, ...).
        columns: dataset columns aligned with the rollouts, the same as :class:`RewardInputs`'.
        extras: per-rollout inputs for estimators that need more: what rewards returned besides
            ``[N]`` (``turn_rewards``, ...) and every input the estimator ``requires`` (a tensor
            whose first dimension is ``N``, or a list with one entry per rollout).
    """

    rewards: Tensor
    group_index: Tensor
    token_mask: Tensor | None = None
    sample_mask: Tensor | None = None
    turn_index: Tensor | None = None
    turns: Sequence[Sequence[TurnSpan]] = ()
    stats: Sequence[Mapping[str, int]] = ()
    columns: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    extras: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class PolicyLossInputs:
    """Inputs of a policy loss.

    Attributes:
        logprobs: ``[N, L]`` log-probabilities of the sampled tokens under the current policy.
        old_logprobs: ``[N, L]`` the same under the behaviour policy that generated them.
        advantages: ``[N]`` per rollout (broadcast to its tokens) or ``[N, L]`` per token, aligned
            with ``logprobs`` (the trainer moves an estimator's ``[N, L]`` into this layout).
        token_mask: ``[N, L]`` 1 on tokens the policy generated (tool responses and padding are 0).
        sample_mask: ``[N]`` optional; 0 drops a whole rollout from the loss (over-budget rollouts
            with ``optim.over_budget=drop``)
            without touching the group statistics its reward took part in.
        group_index: ``[N]`` int, optional; rollouts with equal values belong to one group (one
            question), as in :class:`AdvantageInputs`. The trainer always fills it (each
            trajectory's ``group``); losses whose config sets ``needs_groups`` read it, and the
            trainer then keeps every group whole within one micro-batch. ``None`` where a caller
            has no groups; the other losses ignore it.
        token_weights: ``[N, L]`` detached non-negative weights of each token's policy-gradient
            term (rollout correction's importance weights); ``None`` = 1. Every loss applies them
            (the built-ins through ``_masked_inputs``, which folds them into the advantages).
        extras: the inputs the loss config ``requires``, computed by their providers for the
            whole step and sliced to this micro-batch's rows (first dimension ``N``).
        entropy: ``[N, L]`` detached entropy of the current policy's next-token distribution at
            each trained token (0 elsewhere), for losses whose config sets ``needs_entropy``;
            ``None`` otherwise.
        turn_index: ``[N, L]`` long, each token's model turn (-1 outside any turn); ``None`` where
            a caller has no turns.
        pass_index: which optimisation pass over the batch this is (0 for the first, on-policy
            one), for losses that train in stages.
        passes: how many passes there are (``optim.policy_epochs``; for a loss whose config sets
            ``stages_per_turn``, the step's number of model turns).
        earlier_logprobs: for a loss whose config sets ``stages_per_turn``: this micro-batch's
            log-probabilities (detached, ``[N, L]``) at the start of each earlier pass, oldest
            first (the current pass's are ``logprobs``); empty otherwise.
    """

    logprobs: Tensor
    old_logprobs: Tensor
    advantages: Tensor
    token_mask: Tensor
    sample_mask: Tensor | None = None
    group_index: Tensor | None = None
    token_weights: Tensor | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)
    entropy: Tensor | None = None
    turn_index: Tensor | None = None
    pass_index: int = 0
    passes: int = 1
    earlier_logprobs: tuple[Tensor, ...] = ()

    def effective_mask(self) -> Tensor:
        """``[N, L]`` bool: token mask with dropped samples removed."""
        mask = self.token_mask.bool()
        if self.sample_mask is not None:
            mask = mask & self.sample_mask.bool().unsqueeze(-1)
        return mask

    def token_advantages(self) -> Tensor:
        """``[N, L]`` advantages broadcast to tokens."""
        adv = self.advantages
        return adv.unsqueeze(-1).expand_as(self.logprobs) if adv.dim() == 1 else adv


@dataclass
class LossOutput:
    """A scalar loss to minimise and detached diagnostics (``clip_frac``, ``approx_kl``, ...)."""

    loss: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class RewardInputs:
    """Inputs of a reward function: the whole batch, so rewards can use group statistics.

    Attributes:
        group_index: ``[N]`` int, as in :class:`AdvantageInputs`.
        completions: the model-generated text of each rollout.
        columns: dataset columns aligned with the rollouts (one value per rollout, its
            question's): ``question``, ``question_id``, ``golden_answers`` (``list[list[str]]``),
            ``hops``, ``chain``, ``data_source``, ``entities`` when every question has them
            (``list[list[list[str]]]``: per entity its surface form followed by aliases), and each
            ``extra`` entry that every question has, under its own name.
        status: per-rollout outcome of the rollout engine: ``"ok"``, ``"format_error"`` or
            ``"over_budget"``; ``None`` means all ok.
        think_texts: the concatenated ``<think>`` contents per rollout; ``None`` lets the reward
            extract them from ``completions``.
        generated_tokens: per rollout the number of response tokens the policy generated (loss
            mask 1: its thinking, tool calls and answer; tool responses and the prompt excluded);
            ``None`` when unknown (length-based rewards then refuse the batch).
        observations: per rollout, per model turn (in order, one entry per turn), the evidence
            the tool response after that turn showed the model: the retrieved passages and pages,
            with the model's own words that the tools echo back (its search queries, the titles
            it asked to visit) blanked out; ``""`` for a turn that got no tool response. ``None``
            when unknown (turn-level rewards then refuse the batch).
    """

    group_index: Tensor
    completions: Sequence[str]
    columns: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    status: Sequence[str] | None = None
    think_texts: Sequence[str] | None = None
    generated_tokens: Sequence[int] | None = None
    observations: Sequence[Sequence[str]] | None = None

    def __len__(self) -> int:
        return len(self.completions)


@dataclass
class RewardOutput:
    """What a reward returns when it has more to say than one number per rollout.

    A reward function returns ``Tensor [N]`` or this. ``rewards`` is the reward proper (what a plain
    reward returns: reported, summed by ``weighted_sum``, seen by the advantage estimator as
    :attr:`AdvantageInputs.rewards`); every entry of ``extras`` reaches the advantage estimator as
    :attr:`AdvantageInputs.extras` under the same name.

    Attributes:
        rewards: ``[N]`` float scalar reward per rollout.
        extras: per-rollout tensors, first dimension ``N``. The built-in turn-level rewards fill
            ``turn_rewards``: ``[N, T]`` float, column ``k`` the reward of model turn ``k`` (0-based,
            the order of :attr:`AdvantageInputs.turns`), 0 past a rollout's last turn (``T`` is the
            most turns of any rollout in the batch, at least 1). A ``weighted_sum`` weights a
            term's ``turn_rewards`` by the term's weight and adds those of several terms; other
            extras pass through unweighted, one term each.
        parts: ``[N]`` per component by name, for a reward made of several (a ``weighted_sum``
            reports each term's reward): logged as ``rollout/reward/<name>`` and kept in the
            records. Empty: the reward is its own only component.
    """

    rewards: Tensor
    extras: dict[str, Tensor] = field(default_factory=dict)
    parts: dict[str, Tensor] = field(default_factory=dict)


SEGMENT_KINDS = ("think", "tool_call", "tool_response", "answer", "other")


@dataclass(frozen=True)
class Segment:
    """Tokens ``[start, end)`` of a trajectory's ``token_ids`` that form one span of ``kind``."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class Generation:
    """New tokens for one sequence and why generation stopped: ``stop``, ``eos`` or ``length``.

    ``logprobs``, when the backend records them, holds one entry per new token: the log-probability
    of that token under the distribution it was drawn from, i.e. the log-softmax of the *processed*
    logits (after temperature, top-k and top-p; the unprocessed log-softmax at temperature 0).
    They are the behaviour policy's log-probs that rollout correction compares with the trainer's
    (:mod:`framework.algorithms.losses.rollout_correction`). ``None`` where a backend does not record them
    (``rollout.decoder=generate``). They take no part in equality: two generations are equal when
    their tokens and finish are.
    """

    token_ids: list[int]
    finish: str
    logprobs: list[float] | None = field(default=None, compare=False)


@dataclass
class Trajectory:
    """One rollout: what the model saw and produced, token by token.

    Attributes:
        question: dataset row index of the question.
        group: group id (all rollouts of one question in one step share it).
        token_ids: prompt then response; exactly the sequence the policy was conditioned on.
        loss_mask: 1 on tokens the model generated, 0 on the prompt and on tool responses.
        prompt_len: number of prompt tokens at the start of ``token_ids``.
        segments: spans of ``token_ids`` after the prompt, by kind (think, tool_call, ...).
        turns: the model turns, in ``token_ids`` positions: each turn's span, the tool calls it made
            (with their queries) and the span of the observation that followed.
        status: ``ok`` (answered), ``format_error`` or ``over_budget``.
        answer: the final answer, when there is one.
        think_text: the contents of every ``<think>`` block, joined (E-GRPO matches entities here).
        response_text: the decoded response (model output and tool responses).
        stats: turns, tool_calls, queries, visits, invalid_calls, truncated_turns, response_tokens,
            generated_tokens.
        end_reason: why the rollout ended (``answer``, ``max_turns``, a format error, ...).
        rollout_logprobs: aligned with ``token_ids``: the rollout backend's log-probability of each
            generated token (:attr:`Generation.logprobs`), 0.0 on the prompt and on tool responses;
            ``None`` when some generation of the rollout came without log-probs.
    """

    question: int
    group: int
    token_ids: list[int]
    loss_mask: list[int]
    prompt_len: int
    segments: list[Segment] = field(default_factory=list)
    turns: list[TurnSpan] = field(default_factory=list)
    status: Status = STATUS_OK
    answer: str | None = None
    think_text: str = ""
    response_text: str = ""
    stats: dict[str, int] = field(default_factory=dict)
    end_reason: str = ""
    rollout_logprobs: list[float] | None = None

    @property
    def completion(self) -> str:
        """The response text (what rewards read)."""
        return self.response_text


@dataclass(frozen=True)
class Hit:
    """One retrieved passage.

    Attributes:
        passage_id: stable id of the passage (``<doc_id>`` or ``<doc_id>#<chunk>``).
        doc_id: id of the document the passage belongs to (for the visit tool).
        title: document title.
        text: passage text (without the title).
        score: backend score, higher is better (inner product, BM25, or fused).
    """

    passage_id: str
    doc_id: str
    title: str
    text: str
    score: float

    def __post_init__(self) -> None:  # numpy scalars would not serialise to JSON
        object.__setattr__(self, "score", float(self.score))

    def contents(self) -> str:
        """Search-R1's ``contents`` field: the quoted title, a newline, the text."""
        return f'"{self.title}"\n{self.text}'

    def to_search_r1(self) -> dict[str, Any]:
        """The document dict of Search-R1's ``/retrieve`` response (extra keys are ignored there)."""
        return {"id": self.passage_id, "contents": self.contents(), **asdict(self)}


@dataclass(frozen=True)
class Document:
    """A whole document, as the visit tool returns it."""

    doc_id: str
    title: str
    text: str
