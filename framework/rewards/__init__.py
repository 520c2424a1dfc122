"""Reward functions (registered in :data:`framework.registry.REWARDS`)."""
