"""InfoReasoner ("Optimizing Agentic Reasoning with Retrieval via Synthetic Semantic Information
Gain Reward", arXiv 2602.00845), partial: add to each rollout's exact-match reward a reward for how
much the evidence it retrieved raised a reader model's belief in the gold answer, then GRPO.

Read from the authors' code (github.com/dl-m9/InfoReasoner, 2026-11-26:
``verl/utils/reward_score/qa_em.py`` ``compute_score_em``, ``IG/service/IG_worker.py``
``compute_info_gain``, ``IG/calculate.py``):

- the reward of a rollout is ``EM + 0.6 IG`` (``EM`` 1 or 0; ``IG`` only when the rollout
  retrieved something; a rollout without an answer gets 0), and the advantage is GRPO's over it;
- ``IG = b(gold | question, retrieved) - b(gold | question)``: a frozen reader's belief in the gold
  answer with all the rollout's retrieved text (joined by newlines, cut to its first
  ``max_context_words`` words) and without it, with the prompt ``"Answer the following question
  as briefly as possible.\\nContext: {context}\\nQuestion: {question}\\nAnswer:"`` (no context
  line without context); the belief is the largest, over the gold answers, of a probability that
  the reader answers with that gold answer.

What is ours, hence "partial":

- the belief: the code samples 10 answers from the reader (Qwen2.5-3B-Instruct) at temperature 1
  and sums their likelihoods weighted by a DeBERTa NLI model's entailment with the gold answer.
  Neither model is here; ours is the reader's probability of writing the gold answer itself,
  ``exp(Σ_j log π(a_j | prompt, a_<j))`` with ``" " + answer`` teacher-forced after ``Answer:``
  (the part of the same quantity that an exact answer makes, without paraphrases);
- the reader is the policy as it generated the step's rollouts (the code's reader is frozen and
  larger than the policy);
- the exact-match reward is the configured one (``reward=outcome`` with ``reward.metric=em`` in
  the bundle, this project's normalised exact match).

An earlier reconstruction (before 2026-11-26) credited turns IGPO-style with the gain in the
sentence encoder's similarity between the evidence so far and the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from framework.algorithms.advantages.grpo import GRPOAdvantageConfig, grpo_advantage
from framework.config import Problem, check_range, option
from framework.registry import ADVANTAGES
from framework.types import AdvantageInputs

#: the authors' reader instruction (``BRIEF_PROMPTS["default"]``)
READER_INSTRUCTION = "Answer the following question as briefly as possible.\n"


@dataclass
class InfoReasonerConfig(GRPOAdvantageConfig):
    requires: ClassVar[tuple[str, ...]] = ("context_gain",)
    paper: ClassVar[str] = (
        "InfoReasoner: Optimizing Agentic Reasoning with Retrieval via Synthetic Semantic "
        "Information Gain Reward, arXiv 2602.00845"
    )
    fidelity: ClassVar[str] = "partial"

    weight: float = option(0.6, "w in EM + w IG (the code's 0.6)")
    max_context_words: int = option(512, "retrieved text kept for the reader, in words (code: 512)")
    probe_batch_size: int = option(8, "reader prompts per forward pass")

    def problems(self) -> list[Problem]:
        out = check_range(self.weight, "weight", low=0.0)
        out += check_range(self.max_context_words, "max_context_words", low=1)
        out += check_range(self.probe_batch_size, "probe_batch_size", low=1)
        return out + super().problems()


def reader_prompt(question: str, context: str | None, max_words: int) -> str:
    """The reader's prompt (the authors' ``make_prompt``): the instruction, the context cut to its
    first ``max_words`` words (no context line when there is none), the question, ``Answer:``."""
    prompt = READER_INSTRUCTION
    if context:
        prompt += f"Context: {' '.join(context.split()[:max_words])}\n"
    return prompt + f"Question: {question}\nAnswer:"


@ADVANTAGES.register("info_reasoner", config=InfoReasonerConfig)
def info_reasoner_advantage(inputs: AdvantageInputs, *, cfg: InfoReasonerConfig) -> Tensor:
    """InfoReasoner (partial; module docstring): GRPO over the exact-match reward plus the
    weighted information gain of the rollout's retrieved text (the ``context_gain`` input, 0 for a
    rollout that retrieved nothing or gave no answer)::

        IG_i = max_a b(a | q, retrieved_i) - max_a b(a | q)
        A_i = GRPO(r_i + w IG_i)

    Returns:
        ``[N]`` advantages (zero mean per group).
    """
    gain = torch.as_tensor(inputs.extras["context_gain"], dtype=torch.float32)
    rewards = inputs.rewards.float() + cfg.weight * gain.to(inputs.rewards.device)
    return grpo_advantage(AdvantageInputs(rewards, inputs.group_index), cfg=cfg)
