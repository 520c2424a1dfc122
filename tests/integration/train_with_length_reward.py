"""The train app with the test-only reward ``reward=test_length_mod`` registered, as a script
that Lightning relaunches for each extra process (the random tiny model never answers, so the
shipped rewards are all 0 and nothing would train): ``test_distributed.py`` runs it.

    python tests/integration/train_with_length_reward.py [overrides]
"""

from framework.cli.app import run_app
from framework.cli.train import train
from tests.integration.test_train import length_mod_reward  # noqa: F401  (registers the reward)

if __name__ == "__main__":
    run_app("train", train)
