"""Evaluation: sampling metrics (Pass@k, pass^k), tool use and the entity analysis of E-GRPO."""
