"""``seekrl-rollout``: run the policy as a search agent on a few questions and show its trajectories.

seekrl-rollout                                  # 4 validation questions x 2 rollouts, SmolLM2, FAISS
seekrl-rollout num_questions=8 group_size=4 split=validation agent.max_turns=6
seekrl-rollout rollout.policy.source=path rollout.policy.path=runs/.../checkpoint
"""

from __future__ import annotations

from framework.cli.app import run_app
from framework.rollout.show import show_rollouts


def main() -> None:
    run_app("rollouts", show_rollouts)


if __name__ == "__main__":
    main()
