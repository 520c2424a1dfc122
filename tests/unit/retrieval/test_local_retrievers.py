"""Whether a retriever searches an index on this machine is a property of its config
(``RetrieverConfigBase.local``), which the apps that need a local index read instead of a name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from framework.cli.app import load_config
from framework.config import ConfigError
from framework.registry import RETRIEVERS, load_components
from framework.retrieval.types import RetrieverConfigBase, local_retrievers, remote_problem

load_components(plugins=False)


def test_the_http_client_is_the_only_built_in_remote_retriever():
    assert {"bm25", "faiss", "hybrid"} <= set(local_retrievers())
    assert "http" not in local_retrievers()


def test_serving_a_remote_retriever_is_a_config_error():
    with pytest.raises(
        ConfigError, match=r"\[retriever.name\] got 'http'; expected a local backend"
    ):
        load_config("serve", ["retriever=http"])


def test_a_plugin_remote_retriever_is_refused_by_its_flag_not_its_name():
    @dataclass
    class ElsewhereConfig(RetrieverConfigBase):
        local: ClassVar[bool] = False

    problem = remote_problem(ElsewhereConfig(name="elsewhere"), "why", "fix")
    assert problem is not None and "got 'elsewhere'" in str(problem)
    assert "elsewhere" not in RETRIEVERS  # nothing registered: the flag alone decides
