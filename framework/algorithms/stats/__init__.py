"""Statistics the methods share: over groups of rollouts (:mod:`.group`), masked reductions of
per-token losses (:mod:`.aggregation`) and padding of per-rollout rows (:mod:`.padding`)."""
