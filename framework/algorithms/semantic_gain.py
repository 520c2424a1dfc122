"""InfoReasoner ("Optimizing Agentic Reasoning with Retrieval via Synthetic Semantic Information
Gain Reward"), reconstructed: reward each retrieval turn by the semantic information it brought
toward the answer, and credit turns as IGPO does.

The method section could not be read from here; our choices (``../shared/METHODS-2.md`` item 15),
hence "reconstructed": the belief before turn ``k`` is the cosine similarity, under the packaged
sentence encoder (all-MiniLM-L6-v2, or ``encoder_path``), between the evidence the tools returned in
turns ``0 .. k-1`` (joined, :attr:`~framework.types.TurnSpan.evidence`) and the question's first
gold answer, 0 before any evidence (the ``evidence_similarity`` input); every other step is IGPO's
(:func:`~framework.algorithms.turn_advantages.igpo_advantage`): turn rewards are the gains in that
belief, the last turn's the outcome, z-normalised over the group's turns and summed forward with
discount ``gamma``. The similarity is the embedding model's, not the policy's, so a turn's credit
does not depend on what the policy already believes.

Sources found 2026-11-26 (this stays reconstructed): arXiv 2602.00845; the authors' code
(github.com/dl-m9/InfoReasoner: ``IG/service/IG_worker.py`` ``compute_info_gain``,
``IG/calculate.py``, ``verl/utils/reward_score/qa_em.py``) gives one reward per rollout,
``EM + 0.6 IG`` (EM alone when nothing was retrieved), where IG is a frozen 3B model's
likelihood-and-entailment-weighted belief in the gold answer over 10 sampled answers with the
retrieved text minus without it (a DeBERTa NLI model judges entailment), trained with plain GRPO.
Ours is per-turn, IGPO-style credit from MiniLM similarity: a different estimator of the same idea.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from torch import Tensor

from framework.algorithms.turn_advantages import belief_gain_advantage
from framework.config import ComponentConfig, Problem, check_range
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs


@dataclass
class InfoReasonerConfig(ComponentConfig):
    requires: ClassVar[tuple[str, ...]] = ("evidence_similarity",)
    paper: ClassVar[str] = (
        "InfoReasoner: Optimizing Agentic Reasoning with Retrieval via Synthetic Semantic "
        "Information Gain Reward, arXiv 2602.00845"
    )
    fidelity: ClassVar[str] = "reconstructed"

    gamma: float = field(default=1.0, metadata={"help": "turn discount (IGPO's 1.0; choice)"})
    epsilon: float = field(default=1e-6, metadata={"help": "added to the group std"})
    unbiased_std: bool = field(default=True, metadata={"help": "Bessel-corrected group std"})
    encoder_path: str | None = field(
        default=None,
        metadata={
            "help": "sentence-transformers folder; None = packaged all-MiniLM-L6-v2 (choice)"
        },
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.gamma, "gamma", low=0.0, high=1.0)
        return out + check_range(self.epsilon, "epsilon", low=0.0)


@ADVANTAGES.register("info_reasoner", config=InfoReasonerConfig)
def info_reasoner_advantage(inputs: AdvantageInputs, *, cfg: InfoReasonerConfig) -> Tensor:
    """InfoReasoner (reconstructed; module docstring): IGPO's turn credit with the belief measured
    as the evidence's semantic similarity to the gold answer::

        s_(i,k) = cos(enc(evidence of turns < k), enc(gold answer)), 0 before any evidence
        r_(i,k) = s_(i,k+1) - s_(i,k) for k < T_i - 1;  r_(i,T_i-1) = R_i
        A_(i,k) = Σ_(j >= k) γ^(j-k) z(r_(i,j))   z: over every turn of the group's rollouts

    Returns:
        ``[N, L]`` advantages, 0 on tool responses and padding.
    """
    source = (
        "the training step fills it through the evidence_similarity input provider, which "
        "info_reasoner's config requires (framework.rl.providers)"
    )
    return belief_gain_advantage(inputs, "evidence_similarity", "info_reasoner", source, cfg)
