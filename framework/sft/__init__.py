"""Cold-start SFT: expert search trajectories from the synthesis chains, and supervised training."""
