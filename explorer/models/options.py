"""The built-in models' options and size presets, apart from the models: checking a layout needs no Flax."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationInfo, field_validator


class _Options(BaseModel):
    """A built-in model's options: frozen, no unknown option, no coercion (``"8"`` is not 8)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def _divides(value: int, info: ValidationInfo, other: str, why: str) -> int:
    """``value`` when it divides the already validated option ``other`` (fields are validated in declaration order, so
    the message names the later field); else the error, with ``why``."""
    whole = info.data.get(other)
    if whole is not None and whole % value:
        raise ValueError(f"must divide {other} ({whole}) evenly: {why}")
    return value


class MlpOptions(_Options):
    batch: StrictInt = Field(8, ge=1, le=1 << 20, description="examples per step")
    layers: StrictInt = Field(4, ge=1, le=512, description="LogicalDotReluDot layers")
    depth: StrictInt = Field(1024, ge=1, le=1 << 17, description="width of x and of the hidden layer")
    scan: StrictBool = Field(False, description="stack layers with nn.scan (adds the 'layer' axis)")


class NnxGuideOptions(_Options):
    batch: StrictInt = Field(8, ge=1, le=1 << 20, description="examples per step")
    layers: StrictInt = Field(2, ge=1, le=512, description="DotReluDot layers (created with nnx.vmap)")
    depth: StrictInt = Field(1024, ge=1, le=1 << 17, description="width of x and of every layer")
    logical: StrictBool = Field(False, description="the guide's LogicalMultiDotReluDot (logical names) instead")


class TransformerOptions(_Options):
    batch: StrictInt = Field(8, ge=1, le=1 << 16, description="sequences per step")
    seq_len: StrictInt = Field(128, ge=2, le=1 << 20, description="tokens per sequence")
    layers: StrictInt = Field(2, ge=1, le=512, description="decoder blocks")
    d_model: StrictInt = Field(256, ge=1, le=1 << 16, description="model width (embed)")
    heads: StrictInt = Field(4, ge=1, le=1024, description="query heads")
    kv_heads: StrictInt = Field(4, ge=1, le=1024, description="key/value heads (grouped-query attention when fewer)")
    head_dim: StrictInt = Field(64, ge=1, le=4096, description="width of one head (kv)")
    mlp_dim: StrictInt = Field(1024, ge=1, le=1 << 18, description="MLP hidden width")
    vocab: StrictInt = Field(1024, ge=2, le=1 << 20, description="vocabulary size")
    gated_mlp: StrictBool = Field(False, description="SwiGLU MLP with two input matrices, as Llama")
    learned_positions: StrictBool = Field(True, description="a learned position table, as GPT-2")
    scan: StrictBool = Field(False, description="stack blocks with nn.scan (adds the 'layer' axis)")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="parameter and activation dtype")
    remat: Literal["none", "dots_saveable", "dots_with_no_batch_dims_saveable", "full"] = Field(
        "none",
        description="recompute each decoder block's activations in the backward pass (nn.remat with this "
        "jax.checkpoint_policies policy; full: save nothing but the block's input)",
    )
    microbatches: StrictInt = Field(
        1, ge=1, le=1 << 12, description="gradient accumulation: the batch in this many slices per step (must divide batch)"
    )

    pipeline_stages: StrictInt = Field(
        1, ge=1, le=512, description="pipeline parallelism: the decoder blocks in this many stages (1 = off; must divide layers)"
    )
    pipeline_repeats: StrictInt = Field(
        1,
        ge=1,
        le=512,
        description="circular pipeline: each stage holds this many non-adjacent groups of blocks (MaxText's num_pipeline_repeats)",
    )
    pipeline_microbatches: StrictInt = Field(
        1, ge=1, le=1 << 12, description="pipeline microbatches: the (accumulation) microbatch in this many slices fed through the stages"
    )

    @field_validator("microbatches")
    @classmethod
    def _slices_batch(cls, microbatches: int, info: ValidationInfo) -> int:
        return _divides(microbatches, info, "batch", "each microbatch is an equal slice of the batch")

    @field_validator("pipeline_stages")
    @classmethod
    def _stages_layers(cls, stages: int, info: ValidationInfo) -> int:
        return _divides(stages, info, "layers", "each pipeline stage holds an equal number of decoder blocks")

    @field_validator("pipeline_repeats")
    @classmethod
    def _repeats_layers(cls, repeats: int, info: ValidationInfo) -> int:
        layers, stages = info.data.get("layers"), info.data.get("pipeline_stages")
        if layers is not None and stages is not None and layers % (stages * repeats):
            raise ValueError(
                f"times pipeline_stages ({stages}) must divide layers ({layers}) evenly: each repeat of each stage holds an equal number of decoder blocks"
            )
        return repeats

    @field_validator("pipeline_microbatches")
    @classmethod
    def _pipeline_slices(cls, pipeline_microbatches: int, info: ValidationInfo) -> int:
        batch, accumulation = info.data.get("batch"), info.data.get("microbatches")
        if batch is not None and accumulation is not None and (batch // accumulation) % pipeline_microbatches:
            raise ValueError(
                f"must divide the batch each step feeds the model (batch {batch} / microbatches {accumulation} = {batch // accumulation}) "
                "evenly: each pipeline microbatch is an equal slice of it"
            )
        repeats, stages = info.data.get("pipeline_repeats"), info.data.get("pipeline_stages")
        if repeats is not None and stages is not None and repeats > 1 and pipeline_microbatches < stages:
            raise ValueError(
                f"must be at least pipeline_stages ({stages}) when pipeline_repeats > 1: a circular pipeline feeds a microbatch "
                "back to the first stage only after it left the last"
            )
        return pipeline_microbatches

    @field_validator("kv_heads")
    @classmethod
    def _heads_group(cls, kv_heads: int, info: ValidationInfo) -> int:
        return _divides(kv_heads, info, "heads", "each key/value head serves a group of query heads")


# Each preset's batch is 16 so that a 16-way data axis (docs/pages.md's planned 16x16 mesh) divides it.
SIZE_PRESETS: dict[str, dict] = {
    "gpt2-small": dict(
        batch=16,
        seq_len=1024,
        layers=12,
        d_model=768,
        heads=12,
        kv_heads=12,
        head_dim=64,
        mlp_dim=3072,
        vocab=50257,
        gated_mlp=False,
        learned_positions=True,
    ),
    "llama2-7b": dict(
        batch=16,
        seq_len=4096,
        layers=32,
        d_model=4096,
        heads=32,
        kv_heads=32,
        head_dim=128,
        mlp_dim=11008,
        vocab=32000,
        gated_mlp=True,
        learned_positions=False,
    ),
    "llama2-70b": dict(
        batch=16,
        seq_len=4096,
        layers=80,
        d_model=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        mlp_dim=28672,
        vocab=32000,
        gated_mlp=True,
        learned_positions=False,
    ),
}
