"""LoRA adapters through peft, and saving a policy as a plain Hugging Face checkpoint."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from framework.config import Problem, check_range, option


@dataclass
class LoraConfig:
    """Low-rank adapters (Hu et al. 2021) instead of full fine-tuning."""

    enabled: bool = option(False, "train LoRA adapters only")
    r: int = option(16, "adapter rank")
    alpha: int = option(32, "scaling numerator (scale = alpha / r)")
    dropout: float = 0.0
    target_modules: list[str] = option(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        help="module names that get adapters",
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.r, "r", low=1)
        out += check_range(self.alpha, "alpha", low=1)
        out += check_range(self.dropout, "dropout", low=0.0, high=1.0, high_inclusive=False)
        return out


def apply_lora(model: torch.nn.Module, cfg: LoraConfig) -> Any:
    """``model`` with trainable adapters on ``cfg.target_modules`` (the base weights frozen)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_cfg = PeftLoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_cfg)


def is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")


def export_policy(
    model: Any, tokenizer: Any, folder: str | Path, state_dict: dict[str, Any] | None = None
) -> Path:
    """Save ``model`` (adapters merged into a copy) with its tokenizer as a HF checkpoint folder.

    ``state_dict``: the weights to save instead of ``model``'s own (a sharded policy's, gathered
    whole: :func:`~framework.training.sharding.full_state_dict`). The folder loads with
    ``rollout.policy.source=path rollout.policy.path=<folder>``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    plain = copy.deepcopy(model).merge_and_unload() if is_peft(model) else model
    plain.save_pretrained(folder, safe_serialization=True, state_dict=state_dict)
    tokenizer.save_pretrained(folder)
    return folder


class AdaptersOff:
    """The base model of a LoRA policy (adapters disabled), callable like a model: the KL reference."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, **kwargs: Any) -> Any:
        with self.model.disable_adapter():
            return self.model(**kwargs)


def reference_policy(model: torch.nn.Module) -> Any:
    """The frozen KL reference of ``model``: for LoRA its base with the adapters off (no copy),
    else a frozen copy."""
    if is_peft(model):
        return AdaptersOff(model)
    return copy.deepcopy(model).eval().requires_grad_(False)
