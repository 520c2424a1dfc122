"""Training pieces below Lightning: token batches, the policy update, rollout metrics."""
