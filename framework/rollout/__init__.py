"""Search-agent rollouts: the agent loop, tool-call parsing, generation backends, policies."""
