"""Factories for real public Flax models the project did not write (sources and commits in each SOURCE.md).

Each ``make_<name>(**options)`` returns ``(module, inputs, loss)``:

- Linen: ``module`` is a ``flax.linen.Module``, called as ``module.apply(variables, *inputs)``.
- NNX: ``module`` is a zero-argument function that builds the ``nnx.Module`` (build it under the analysis' mesh:
  Flax's eager sharding needs one), called as ``model(*inputs)``. The function creates its own ``nnx.Rngs``, so it
  can be called inside ``nnx.eval_shape`` or ``jax.jit``.

``inputs`` is a list of ``InputSpec``; ``loss(output, *inputs)`` returns a scalar. Where the authors' entry point
needs keyword arguments or extra positional arguments (dropout flags, a cache), a tiny subclass below fixes them;
subclassing keeps the authors' parameter paths unchanged.

``AUTHORS_RULES[name]`` holds each codebase's own logical axis rules for a mesh with axes ("data", "model");
``AUTHORS_RULES_3AXIS[name]`` the same for ("data", "fsdp", "model") where the codebase has an FSDP axis;
``AUTHORS_MESH_AXES[name]`` the mesh axis names the model's annotations assume; ``AUTHORS_INPUT_SPECS[name]`` how the
authors' training code shards each input (mesh axes), where it does so without logical names.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import PartitionSpec as P

from explorer.models import InputSpec

from .big_vision_vit import vit as bv_vit
from .bonsai_siglip import modeling as siglip_modeling
from .flax_gemma import transformer as gemma_transformer
from .flax_gemma import transformer_cfg as gemma_cfg
from .flax_lm1b import models as lm1b_models
from .flax_nnx_guide import guide as nnx_guide
from .mu_transformer import model as mu_model
from .t5x_t5 import network as t5_network
from .tunix_gemma import model as tunix_gemma
from .tunix_llama3 import model as tunix_llama3


def _token_xent(logits, targets):
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets).mean()


# ---------------------------------------------------------------------------------------------------------------
# (a) T5X T5.1.1 encoder-decoder: flax.linen.partitioning (param_with_axes, params_axes, with_sharding_constraint)


class T5ForTraining(t5_network.Transformer):
    """T5X's ``Transformer`` called with dropout off (T5X's train step passes ``enable_dropout``)."""

    def __call__(self, encoder_input_tokens, decoder_input_tokens, decoder_target_tokens):
        return super().__call__(
            encoder_input_tokens, decoder_input_tokens, decoder_target_tokens, enable_dropout=False
        )


def make_t5x_t5(
    num_encoder_layers: int = 2,
    num_decoder_layers: int = 2,
    emb_dim: int = 64,
    num_heads: int = 4,
    head_dim: int = 16,
    mlp_dim: int = 128,
    vocab_size: int = 128,
    batch: int = 8,
    encoder_length: int = 16,
    decoder_length: int = 16,
    mlp_activations: tuple[str, ...] = ("gelu", "linear"),
):
    """T5.1.1-style config (gated GELU MLP as in T5X's t5_1_1 gin configs), scaled down."""
    config = t5_network.T5Config(
        vocab_size=vocab_size, dtype=jnp.float32, emb_dim=emb_dim, num_heads=num_heads,
        num_encoder_layers=num_encoder_layers, num_decoder_layers=num_decoder_layers, head_dim=head_dim,
        mlp_dim=mlp_dim, mlp_activations=tuple(mlp_activations), dropout_rate=0.0, logits_via_embedding=False,
    )
    inputs = [
        InputSpec("encoder_input_tokens", (batch, encoder_length), "int32", ("batch", "length")),
        InputSpec("decoder_input_tokens", (batch, decoder_length), "int32", ("batch", "length")),
        InputSpec("decoder_target_tokens", (batch, decoder_length), "int32", ("batch", "length")),
    ]

    def loss(logits, encoder_input_tokens, decoder_input_tokens, decoder_target_tokens):
        return _token_xent(logits, decoder_target_tokens)

    return T5ForTraining(config), inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# (b) Flax lm1b TransformerLM: nn.with_logical_partitioning, incl. 3-D attention kernels annotated with 2 names


def make_flax_lm1b(
    num_layers: int = 2,
    emb_dim: int = 64,
    num_heads: int = 4,
    qkv_dim: int = 64,
    mlp_dim: int = 128,
    vocab_size: int = 128,
    batch: int = 8,
    length: int = 16,
):
    """lm1b's decoder-only LM; ``nn.MultiHeadDotProductAttention`` kernels are (embed, heads, head_dim) = 3-D
    but annotated ('embed', 'kv'); the output kernel is (heads, head_dim, embed) annotated ('embed', 'kv')."""
    config = lm1b_models.TransformerConfig(
        vocab_size=vocab_size, output_vocab_size=vocab_size, logits_via_embedding=False, dtype=jnp.float32,
        emb_dim=emb_dim, num_heads=num_heads, num_layers=num_layers, qkv_dim=qkv_dim, mlp_dim=mlp_dim,
        max_len=length, dropout_rate=0.0, attention_dropout_rate=0.0, deterministic=True, decode=False,
    )
    inputs = [InputSpec("inputs", (batch, length), "int32", None)]

    def loss(logits, tokens):
        return _token_xent(logits, tokens)

    return lm1b_models.TransformerLM(config), inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# (c) mu_transformer: nn.with_partitioning(init, mesh_axes, mesh) and jax.lax.with_sharding_constraint with a
#     NamedSharding on the model's own mesh (axes "X", "Y"), inside nn.scan + nn_partitioning.remat


class MuTransformerLogits(mu_model.Transformer):
    """mu_transformer's ``Transformer`` without a kv cache, returning only the logits of its output dict."""

    def __call__(self, inputs):
        return super().__call__(inputs, None)["logits"]


def make_mu_transformer(
    mesh_shape: tuple[int, int] = (2, 4),
    n_layer: int = 2,
    d_model: int = 64,
    d_head: int = 16,
    ff_multiple: int = 4,
    n_vocab: int = 128,
    batch: int = 8,
    sequence_len: int = 16,
    dtype: str = "float32",
):
    """The model holds its mesh (axes ("X", "Y"), as the authors' launcher builds it) as a module attribute."""
    mesh = jax.make_mesh(tuple(mesh_shape), ("X", "Y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    config = mu_model.TransformerConfig.create(
        param_dtype="float32", dtype=dtype, sequence_len=sequence_len, d_model=d_model, d_head=d_head,
        ff_multiple=ff_multiple, e_norm=False, q_init="vs", r_init="vs", u_init="mup", qk_scale=1 / d_head,
        qk_norm=False, kv_mqa=False, rotary_base=10_000, attn_act_name="softmax", ff_act_name="relu",
        norm_eps=1e-5, norm_gains=False, norm_gains_type="vector", proj_biases=False, n_layer=n_layer,
        n_vocab=n_vocab, bos_token_id=0, eos_token_id=1, pad_token_id=0, is_train=True, is_decoding=False,
    )
    inputs = [InputSpec("inputs", (batch, sequence_len), "int32", None)]

    def loss(logits, tokens):
        return _token_xent(logits[:, :-1], tokens[:, 1:])

    return MuTransformerLogits(config, mesh), inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# (d) big_vision ViT: unannotated parameters, activations constrained with nn.with_logical_constraint, the same
#     ("act_batch", "act_len", "act_emb") several times per block; optional nn.scan + nn.remat over the blocks


class ViTLogits(bv_vit._Model):  # pylint: disable=protected-access
    """big_vision's ViT (``vit.Model`` returns this class) returning only the logits, ``train=False`` (no dropout)."""

    def __call__(self, image):
        logits, _ = super().__call__(image, train=False)
        return logits


def make_big_vision_vit(
    width: int = 64,
    depth: int = 2,
    mlp_dim: int = 128,
    num_heads: int = 4,
    patch_size: int = 8,
    image_size: int = 32,
    num_classes: int = 16,
    pool_type: str = "gap",
    scan: bool = False,
    batch: int = 8,
):
    """``vit.Model`` fields (as ``decode_variant`` fills them), scaled down; ``scan=True`` stacks the blocks with
    ``nn.scan`` (parameters gain a leading depth axis, the body's constraints run ``depth`` times)."""
    model = ViTLogits(
        num_classes=num_classes, patch_size=(patch_size, patch_size), width=width, depth=depth, mlp_dim=mlp_dim,
        num_heads=num_heads, posemb="learn", pool_type=pool_type, scan=scan,
    )
    inputs = [InputSpec("image", (batch, image_size, image_size, 3), "float32", None)]

    def loss(logits, image):
        return jnp.mean(logits ** 2)

    return model, inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# NNX (a): Flax examples/gemma: kernel_metadata={'out_sharding': P(...)} with mesh axis names, einsum out_sharding


class GemmaLM(gemma_transformer.Transformer):
    """The Flax Gemma example's ``Transformer`` without a kv cache, returning only the logits."""

    def __call__(self, last_tokens, positions, attention_mask):
        logits, _ = super().__call__(last_tokens, positions, None, attention_mask)
        return logits


def make_flax_gemma(
    num_layers: int = 2,
    embed_dim: int = 64,
    hidden_dim: int = 128,
    num_heads: int = 4,
    head_dim: int = 16,
    num_kv_heads: int = 1,
    num_embed: int = 128,
    batch: int = 8,
    length: int = 16,
    fsdp_axis: str = "data",
    tensor_axis: str = "model",
    sharded: bool = True,
):
    """Config shaped like the example's ``configs/tiny.py`` (global attention, MQA), scaled down.

    ``fsdp_axis``/``tensor_axis`` are the arguments of the authors' ``ShardingConfig.fsdp_tp_sharding`` (their train.py
    passes "fsdp" and "tensor" for a mesh with those axes, Explicit axis types).
    """
    shd_config = (
        gemma_cfg.ShardingConfig.fsdp_tp_sharding(fsdp_axis_name=fsdp_axis, tensor_parallel_axis_name=tensor_axis)
        if sharded else gemma_cfg.ShardingConfig.no_sharding()
    )
    config = gemma_cfg.TransformerConfig(
        num_layers=num_layers, num_embed=num_embed, embed_dim=embed_dim, hidden_dim=hidden_dim,
        num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads, final_logit_softcap=None,
        use_post_attn_norm=False, use_post_ffw_norm=False,
        attention_types=(gemma_cfg.AttentionType.GLOBAL,) * num_layers, shd_config=shd_config,
    )
    inputs = [
        InputSpec("last_tokens", (batch, length), "int32", None),
        InputSpec("positions", (batch, length), "int32", None),
        InputSpec("attention_mask", (batch, length, length), "bool", None),
    ]

    def loss(logits, last_tokens, positions, attention_mask):
        # one-hot cross-entropy as the example's train.py computes it (an integer-label gather on logits sharded
        # over the vocabulary has no unambiguous output sharding on an Explicit mesh)
        one_hot = jax.nn.one_hot(last_tokens, logits.shape[-1], dtype=jnp.float32)
        return -jnp.mean(jnp.sum(one_hot * nnx.log_softmax(logits.astype(jnp.float32)), axis=-1))

    return (lambda: GemmaLM(config, rngs=nnx.Rngs(params=0, dropout=0))), inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# NNX (b): bonsai Gemma3 SigLIP vision tower: kernel/bias_metadata={'out_sharding': P(...)} for Linear/Embed and
#          initializers called with out_sharding=P(...) (sharding on the array, no Flax metadata) for Conv/LayerNorm


def _rename_axes(spec, names: dict[str, str]):
    if spec is None:
        return None
    return P(*(names.get(a, a) if isinstance(a, str) else a for a in spec))


def make_bonsai_siglip(
    num_hidden_layers: int = 2,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_attention_heads: int = 4,
    image_size: int = 32,
    patch_size: int = 8,
    num_channels: int = 3,
    batch: int = 8,
    fsdp_axis: str = "data",
    tp_axis: str = "model",
    sharded: bool = True,
):
    """The authors' ``VisionShardConfig.default(use_fsdp=True, use_tp=True)`` names the mesh axes "fsdp" and "tp"
    (their tests use an Explicit (4, 2) mesh with those names); this factory renames them to ``fsdp_axis`` and
    ``tp_axis`` so the same layout runs on the analysis' mesh."""
    shd = siglip_modeling.VisionShardConfig.no_sharding()
    if sharded:
        default = siglip_modeling.VisionShardConfig.default(use_fsdp=True, use_tp=True)
        names = {siglip_modeling.ShardMode.FSDP.value: fsdp_axis, siglip_modeling.ShardMode.TP.value: tp_axis}
        shd = siglip_modeling.VisionShardConfig(
            **{f.name: _rename_axes(getattr(default, f.name), names) for f in dataclasses.fields(default)}
        )
    config = siglip_modeling.VisionConfig(
        attention_dropout=0.0, hidden_size=hidden_size, image_size=image_size,
        intermediate_size=intermediate_size, layer_norm_eps=1e-6, num_attention_heads=num_attention_heads,
        num_channels=num_channels, num_hidden_layers=num_hidden_layers, patch_size=patch_size,
        vision_use_head=False, shd_cfg=shd,
    )
    inputs = [InputSpec("pixel_values", (batch, image_size, image_size, num_channels), "float32", None)]

    def loss(features, pixel_values):
        return jnp.mean(features.astype(jnp.float32) ** 2)

    return (lambda: siglip_modeling.SiglipVisionTransformer(config, rngs=nnx.Rngs(0))), inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# NNX guide (docs_nnx/guides/flax_gspmd.md): the model the app builds in; here for cross-checking only


def make_flax_nnx_guide(depth: int = 1024, num_layers: int = 2, batch: int = 8, logical: bool = False, microbatches: int = 1):
    """``MultiDotReluDot`` (mesh axis names; ``sharding=`` alias on w2; ``jax.lax.with_sharding_constraint`` with a
    bare ``P``) or, with ``logical=True``, ``LogicalMultiDotReluDot`` (to be built under
    ``nnx.logical_axis_rules(nnx_guide.sharding_rules)``). The guide's loss is MSE against a label; here the label
    is zero so the step takes one input. ``microbatches`` is read by the explorer's train step (gradient
    accumulation), not by the model."""
    cls = nnx_guide.LogicalMultiDotReluDot if logical else nnx_guide.MultiDotReluDot
    inputs = [InputSpec("x", (batch, depth), "float32", None)]

    def loss(y_pred, x):
        return jnp.mean(y_pred ** 2)

    return (lambda: cls(depth, num_layers, rngs=nnx.Rngs(0))), inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# NNX (c): tunix Llama3: nnx.Param(..., sharding=P(mesh axes)) and nnx.with_partitioning(init, P(mesh axes)) from a
#          ShardingConfig; activations through tunix's shard() helper, which is a no-op on CPU


class TunixLlama3LM(tunix_llama3.Llama3):
    """tunix's ``Llama3`` without a kv cache, returning only the logits."""

    def __call__(self, input_tokens, positions, attention_mask):
        logits, _ = super().__call__(input_tokens, positions, None, attention_mask)
        return logits


def make_tunix_llama3(
    num_layers: int = 2,
    vocab_size: int = 128,
    embed_dim: int = 64,
    hidden_dim: int = 128,
    num_heads: int = 8,
    head_dim: int = 16,
    num_kv_heads: int = 4,
    weight_tying: bool = False,
    batch: int = 8,
    length: int = 16,
    fsdp_axis: str = "data",
    tp_axis: str = "model",
    sharded: bool = True,
):
    """Config shaped like ``ModelConfig.llama3p2_1b`` (GQA, RMSNorm, RoPE), scaled down. The kv-head axis of
    ``k_proj``/``v_proj`` is sharded over ``tp_axis``, so ``num_kv_heads`` must divide by that axis' size (4 here).

    The authors' ``ShardingConfig.get_default_sharding()`` names the mesh axes "fsdp" and "tp" (tunix's trainers
    build a mesh with those names, Auto axis types); this factory renames them to ``fsdp_axis``/``tp_axis`` so the
    same layout runs on the analysis' mesh. ``sharded=False`` gives every field ``None`` (replicated; the authors
    have no such config). ``weight_tying=True`` drops ``lm_head`` and decodes with the embedding (Llama 3.2).
    """
    shd = tunix_llama3.ShardingConfig.get_default_sharding()
    names = {"fsdp": fsdp_axis, "tp": tp_axis}
    shd = tunix_llama3.ShardingConfig(**{
        f.name: (_rename_axes(getattr(shd, f.name), names) if sharded else None)
        for f in dataclasses.fields(shd)
    })
    config = tunix_llama3.ModelConfig(
        num_layers=num_layers, vocab_size=vocab_size, embed_dim=embed_dim, hidden_dim=hidden_dim,
        num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads, rope_theta=500_000, norm_eps=1e-5,
        shd_config=shd, weight_tying=weight_tying,
    )
    inputs = [
        InputSpec("input_tokens", (batch, length), "int32", None),
        InputSpec("positions", (batch, length), "int32", None),
        InputSpec("attention_mask", (batch, length, length), "bool", None),
    ]

    def loss(logits, input_tokens, positions, attention_mask):
        return _token_xent(logits[:, :-1], input_tokens[:, 1:])

    return (lambda: TunixLlama3LM(config, rngs=nnx.Rngs(params=0))), inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# NNX (d): tunix Gemma/Gemma2: same styles as (c), plus a fused qkv kernel (3, heads, embed, head_dim) and, for a
#          single kv head, a kv kernel annotated with the literal mesh axis "fsdp" (not taken from the config)


class TunixGemmaLM(tunix_gemma.Gemma):
    """tunix's ``Gemma`` without a kv cache, returning only the logits."""

    def __call__(self, last_tokens, positions, attention_mask):
        logits, _ = super().__call__(last_tokens, positions, None, attention_mask)
        return logits


def make_tunix_gemma(
    num_layers: int = 2,
    num_embed: int = 128,
    embed_dim: int = 64,
    hidden_dim: int = 128,
    num_heads: int = 4,
    head_dim: int = 16,
    num_kv_heads: int = 4,
    sliding_window_size: int = 8,
    batch: int = 8,
    length: int = 16,
    fsdp_axis: str = "data",
    tp_axis: str = "model",
):
    """Config shaped like ``ModelConfig.gemma2_2b`` (local-sliding/global attention alternating, post-attention and
    post-FFW norms, logit soft caps), scaled down.

    ``num_kv_heads == num_heads`` (default) creates the fused ``qkv_einsum`` (as in ``gemma_7b``); ``1 <
    num_kv_heads < num_heads`` creates ``q_einsum`` + ``kv_einsum`` (kv heads sharded over ``tp_axis``: must divide
    by its size); ``num_kv_heads == 1`` (``gemma_2b``) annotates ``kv_einsum`` with the hard-coded mesh axis
    ``"fsdp"``, which ``fsdp_axis`` does not rename: that model only builds on a mesh with an ``fsdp`` axis.
    Mesh axis names as in ``make_tunix_llama3``.
    """
    shd = tunix_gemma.ShardingConfig.get_default_sharding()
    names = {"fsdp": fsdp_axis, "tp": tp_axis}
    shd = tunix_gemma.ShardingConfig(
        **{f.name: _rename_axes(getattr(shd, f.name), names) for f in dataclasses.fields(shd)}
    )
    attention_types = (tunix_gemma.AttentionType.LOCAL_SLIDING, tunix_gemma.AttentionType.GLOBAL)
    config = tunix_gemma.ModelConfig(
        num_layers=num_layers, num_embed=num_embed, embed_dim=embed_dim, hidden_dim=hidden_dim,
        num_heads=num_heads, head_dim=head_dim, num_kv_heads=num_kv_heads, final_logit_softcap=30.0,
        use_post_attn_norm=True, use_post_ffw_norm=True,
        attention_types=tuple(attention_types[i % 2] for i in range(num_layers)), attn_logits_soft_cap=50.0,
        sliding_window_size=sliding_window_size, shd_config=shd,
    )
    inputs = [
        InputSpec("last_tokens", (batch, length), "int32", None),
        InputSpec("positions", (batch, length), "int32", None),
        InputSpec("attention_mask", (batch, length, length), "bool", None),
    ]

    def loss(logits, last_tokens, positions, attention_mask):
        return _token_xent(logits[:, :-1], last_tokens[:, 1:])

    return (lambda: TunixGemmaLM(config, rngs=nnx.Rngs(params=0))), inputs, loss


# ---------------------------------------------------------------------------------------------------------------
# The authors' rules and mesh axes

# T5X t5x/partitioning.py standard_logical_axis_rules(activation_partitioning_dims=1, parameter_partitioning_dims=1)
_T5X_RULES_1D = [
    ["batch", "data"], ["vocab", "model"], ["embed", None], ["mlp", "model"], ["heads", "model"], ["kv", None],
    ["joined_kv", "model"],
    ["relpos_buckets", None], ["abspos_buckets", None], ["length", None], ["layers", None], ["stack", None],
    ["mlp_activations", None],
]
# standard_logical_axis_rules(activation_partitioning_dims=2, parameter_partitioning_dims=2): 'embed' has two rules
_T5X_RULES_2D = [
    ["batch", "data"], ["vocab", "model"], ["mlp", "model"], ["heads", "model"], ["kv", None],
    ["joined_kv", "model"], ["embed", "model"], ["embed", "data"],
    ["relpos_buckets", None], ["abspos_buckets", None], ["length", None], ["layers", None], ["stack", None],
    ["mlp_activations", None],
]
# flax examples/lm1b/configs/default.py, mesh ('data', 'fsdp', 'tensor'); 'tensor' renamed 'model'
_LM1B_RULES_3AXIS = [["mlp", "model"], ["vocab", "model"], ["embed", "fsdp"], ["heads", "model"]]
# the same on ('data', 'model'): there is no 'fsdp' axis, so 'embed' stays unsharded
_LM1B_RULES = [["mlp", "model"], ["vocab", "model"], ["embed", None], ["heads", "model"]]

AUTHORS_RULES: dict[str, list[list]] = {
    "t5x_t5": _T5X_RULES_1D,
    "t5x_t5_2d": _T5X_RULES_2D,
    "flax_lm1b": _LM1B_RULES,
    "mu_transformer": [],
    # big_vision/train.py default (config.get("sharding_rules", [("act_batch", "data")])); parameters are sharded by
    # big_vision's own regex "sharding_strategy" (default [(".*", "replicate")]), not by Flax annotations
    "big_vision_vit": [["act_batch", "data"]],
    "flax_gemma": [],
    "bonsai_siglip": [],
    "flax_nnx_guide": [],
    "flax_nnx_guide_logical": [["batch", "data"], ["hidden", "model"], ["embed", None]],
    "tunix_llama3": [],  # mesh axis names, no logical names
    "tunix_gemma": [],
}
AUTHORS_RULES_3AXIS: dict[str, list[list]] = {
    "flax_lm1b": _LM1B_RULES_3AXIS,
    # big_vision jetformer configs use [('act_batch', ('slice', 'replica', 'fsdp'))]: a rule to a tuple of mesh axes
    "big_vision_vit": [["act_batch", ["data", "fsdp"]]],
    # mesh axis names (no rules); on ('data','fsdp','model') pass make_tunix_llama3(fsdp_axis="fsdp")
    "tunix_llama3": [],
    "tunix_gemma": [],  # likewise; num_kv_heads=1 needs this mesh (its kv kernel names "fsdp" literally)
}

AUTHORS_MESH_AXES: dict[str, tuple[str, ...]] = {
    "t5x_t5": ("data", "model"),
    "flax_lm1b": ("data", "fsdp", "tensor"),
    "mu_transformer": ("X", "Y"),
    "big_vision_vit": ("data",),
    "flax_gemma": ("fsdp", "tensor"),
    "bonsai_siglip": ("fsdp", "tp"),
    "flax_nnx_guide": ("data", "model"),
    "tunix_llama3": ("fsdp", "tp"),
    "tunix_gemma": ("fsdp", "tp"),
}

AUTHORS_INPUT_SPECS: dict[str, dict[str, tuple]] = {
    "flax_lm1b": {"inputs": ("data", None)},
    "mu_transformer": {"inputs": (("X", "Y"), None)},  # launch.py to_global_array: P(mesh.axis_names)
    "flax_gemma": {"last_tokens": ("data", None), "positions": ("data", None), "attention_mask": ("data", None, None)},
    "bonsai_siglip": {"pixel_values": ("data", None, None, None)},
    "big_vision_vit": {"image": ("data", None, None, None)},
    "flax_nnx_guide": {"x": ("data", None)},
    # tunix/sft/sharding_utils.shard_input(batch, data_sharding_axis=("fsdp",)); "fsdp" is the factory's fsdp_axis
    "tunix_llama3": {"input_tokens": ("data", None), "positions": ("data", None), "attention_mask": ("data", None, None)},
    "tunix_gemma": {"last_tokens": ("data", None), "positions": ("data", None), "attention_mask": ("data", None, None)},
}


# ---------------------------------------------------------------------------------------------------------------
# MaxText (AI-Hypercomputer/maxtext): NNX layers (DenseGeneral, MlpBlock, RMSNorm, simple_layer) bridged into a
# Linen decoder with nnx_wrappers.to_linen(..., metadata_fn=variable_to_logically_partitioned), scanned with
# nn.scan(metadata_params={PARTITION_NAME: "layers"}, param_scan_axis=1); activations through MaxText's
# maybe_shard_with_logical (which drops size-1 mesh axes); base.yml's 76 rules (70 names) and 12-axis mesh.

from .maxtext import base_config as maxtext_base  # noqa: E402
from .maxtext import common_types as maxtext_common  # noqa: E402
from .maxtext import decoder as maxtext_decoder  # noqa: E402

MAXTEXT_MESH_SHAPE = "1x1x1x4x1x1x1x1x2x1x1x1"  # diloco, data, stage, fsdp=4, ..., tensor=2, ... (8 devices)
MAXTEXT_CONTEXT_MESH = "context"  # mesh_shape: the layers take the mesh they are traced under


def _maxtext_mesh(mesh_shape: str | None):
    """base.yml's 12-axis mesh of ``mesh_shape`` on this process's first devices, or, where it has fewer (a compile for
    a TPU slice this machine does not have: ``explorer compile --target v5p-64``), an ``AbstractMesh`` of that shape:
    the layers' constraints then bind to the mesh the step is traced under. ``"context"`` (or None): no mesh of its own,
    the layers take the mesh they are traced under (any axes: a layout's, the advisor's candidates')."""
    if mesh_shape in (None, MAXTEXT_CONTEXT_MESH):
        return None
    shape = tuple(int(n) for n in mesh_shape.split("x"))
    axes = tuple(maxtext_base.MESH_AXES)
    if len(shape) != len(axes):
        raise ValueError(f"mesh_shape must give {len(axes)} sizes ({', '.join(axes)}), not {mesh_shape!r}")
    size = 1
    for n in shape:
        size *= n
    types = (jax.sharding.AxisType.Auto,) * len(axes)
    if size > len(jax.devices()):
        return jax.sharding.AbstractMesh(shape, axes, axis_types=types)
    return jax.make_mesh(shape, axes, axis_types=types, devices=jax.devices()[:size])


def make_maxtext_decoder(
    block: str = "llama2",
    scan_layers: bool = True,
    num_decoder_layers: int = 2,
    emb_dim: int = 64,
    mlp_dim: int = 128,
    num_heads: int = 4,
    head_dim: int = 16,
    batch: int = 8,
    length: int = 16,
    mesh_shape: str | None = MAXTEXT_MESH_SHAPE,
    dtype: str = "bfloat16",
    remat_policy: str = "none",
):
    """MaxText's layers under a decoder written after decoders.py (see maxtext/decoder.py). The layers hold the mesh
    (MaxText passes it to every layer), built here from ``mesh_shape`` with base.yml's ``mesh_axes`` (``"context"``: the
    mesh the model is traced under, so that any layout's mesh is the layers' own). ``remat_policy``
    is MaxText's (``MAXTEXT_REMAT_POLICIES``; ``"none"``: no ``nn.remat``)."""
    config = maxtext_decoder.small_config(
        emb_dim=emb_dim, mlp_dim=mlp_dim, num_query_heads=num_heads, num_kv_heads=num_heads, head_dim=head_dim,
        num_decoder_layers=num_decoder_layers, scan_layers=scan_layers, dtype=jnp.dtype(dtype),
        remat_policy=_maxtext_remat_policy(remat_policy), max_target_length=length, micro_batch_size_to_train_on=batch,
    )
    mesh = _maxtext_mesh(mesh_shape)
    inputs = [InputSpec("embedded", (batch, length, emb_dim), dtype,
                        ("activation_embed_and_logits_batch", "activation_length", "activation_embed"))]

    def loss(y, x):
        return jnp.mean(y.astype(jnp.float32) ** 2)

    return maxtext_decoder.Decoder(config, mesh, block), inputs, loss


# decoders.py get_remat_policy's policies (the host-offloading ones aside), most kept first, and "none" (no nn.remat)
MAXTEXT_REMAT_POLICIES = ("none", "minimal_with_context", "minimal", "save_dot_with_context_except_mlp", "save_dot_except_mlpwi",
                          "save_dot_except_mlp", "save_qkv_proj", "save_out_proj", "full")


def _maxtext_remat_policy(remat_policy: str) -> str:
    if remat_policy not in MAXTEXT_REMAT_POLICIES:
        raise ValueError(f"remat_policy must be one of {', '.join(MAXTEXT_REMAT_POLICIES)}, not {remat_policy!r}")
    return remat_policy


def make_maxtext_moe(
    num_experts: int = 8,
    num_experts_per_tok: int = 2,
    capacity_factor: float = 1.25,
    scan_layers: bool = True,
    num_decoder_layers: int = 2,
    emb_dim: int = 64,
    mlp_dim: int = 128,
    num_heads: int = 4,
    num_kv_heads: int = 4,
    head_dim: int = 16,
    batch: int = 8,
    length: int = 16,
    mesh_shape: str | None = MAXTEXT_MESH_SHAPE,
    dtype: str = "bfloat16",
    remat_policy: str = "none",
):
    """MaxText's Mixtral decoder layer (``mixtral.py``: ``moe.RoutedMoE`` after a reduced attention) under the decoder
    of maxtext/decoder.py, configured like ``configs/models/mixtral-8x7b.yml`` scaled down: ``num_experts`` experts,
    top-``num_experts_per_tok``, SwiGLU experts of width ``mlp_dim``. The dense path (``sparse_matmul=False``) with
    token dropping at ``capacity_factor`` (> 0): einsum dispatch/combine over MaxText's ``activation_exp`` /
    ``activation_batch_moe`` / ``activation_embed_moe`` ... names, expert kernels ``("exp", "embed_moe", "mlp_moe")``.
    ``remat_policy`` as for ``make_maxtext_decoder``."""
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be > 0 (the dense path with token dropping), not {capacity_factor!r}")
    if not 1 <= num_experts_per_tok <= num_experts:
        raise ValueError(f"num_experts_per_tok must be between 1 and num_experts ({num_experts}), not {num_experts_per_tok!r}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads must divide num_heads ({num_heads}), not {num_kv_heads!r}")
    config = maxtext_decoder.small_config(
        emb_dim=emb_dim, mlp_dim=mlp_dim, moe_mlp_dim=mlp_dim, num_query_heads=num_heads, num_kv_heads=num_kv_heads,
        head_dim=head_dim, num_decoder_layers=num_decoder_layers, scan_layers=scan_layers, dtype=jnp.dtype(dtype),
        decoder_block=maxtext_common.DecoderBlockType.MIXTRAL, num_experts=num_experts,
        num_experts_per_tok=num_experts_per_tok, capacity_factor=float(capacity_factor), sparse_matmul=False,
        remat_policy=_maxtext_remat_policy(remat_policy), max_target_length=length, micro_batch_size_to_train_on=batch,
    )
    mesh = _maxtext_mesh(mesh_shape)
    inputs = [InputSpec("embedded", (batch, length, emb_dim), dtype,
                        ("activation_embed_and_logits_batch", "activation_length", "activation_embed"))]

    def loss(y, x):
        return jnp.mean(y.astype(jnp.float32) ** 2)

    return maxtext_decoder.Decoder(config, mesh, "mixtral"), inputs, loss


def maxtext_rules() -> list[list]:
    """base.yml's logical_axis_rules in the layout form (``[]`` -> null: both replicate)."""
    return [[name, (axes if axes else None) if isinstance(axes, list) else axes]
            for name, axes in maxtext_base.LOGICAL_AXIS_RULES]


# ---------------------------------------------------------------------------------------------------------------
# flaxformer MoE (google/flaxformer architectures/moe): MoeLayer with a tokens-choose (masked or scatter) or
# experts-choose router, experts (dense.MlpBlock, param_with_axes) stacked by vmap_with_axes(spmd_axis_name='expert'),
# rank 3-5 constraints over ('batch', 'unmodeled', 'expert', 'expert_replicas', 'length', 'embed'), capacity factor;
# T5X's MoE rules (t5x/contrib/moe/partitioning.py) on its ('data', 'expert', 'model') mesh.

from .flaxformer_moe import dense as ff_dense  # noqa: E402
from .flaxformer_moe import moe_layers as ff_moe  # noqa: E402
from .flaxformer_moe import routing as ff_routing  # noqa: E402


class MoeForTraining(ff_moe.MoeLayer):
    """flaxformer's ``MoeLayer`` called with dropout off (the train step passes ``enable_dropout``)."""

    def __call__(self, inputs):
        return super().__call__(inputs, enable_dropout=False)


def make_flaxformer_moe(
    num_experts: int = 4,
    num_expert_partitions: int = 2,
    num_model_partitions: int = 2,
    router: str = "tokens_choose_masked",
    num_selected_experts: int = 2,
    capacity_factor: float = 1.5,
    emb_dim: int = 32,
    mlp_dim: int = 64,
    batch: int = 8,
    length: int = 8,
    max_group_size: int = 16,
):
    """Configured like flaxformer's ``moe_layers_test`` and the ``tokens_choose_*`` / ``experts_choose_*`` gin
    configs (gated GELU expert MLP), scaled down. ``num_expert_partitions`` / ``num_model_partitions`` are the
    sizes of the mesh's ``expert`` / ``model`` axes (T5X's MoE partitioner passes them)."""
    weights = ff_routing.RouterWeights(name="router_weights")
    if router == "tokens_choose_masked":
        routing_module = ff_routing.TokensChooseMaskedRouter(
            router_weights=weights, num_selected_experts=num_selected_experts, jitter_noise=0.0,
            batch_prioritized_routing=True, ignore_padding_tokens=False, dtype=jnp.float32)
    elif router == "tokens_choose_scatter":
        routing_module = ff_routing.TokensChooseScatterRouter(
            router_weights=weights, num_selected_experts=num_selected_experts, jitter_noise=0.0,
            batch_prioritized_routing=True, ignore_padding_tokens=False, dtype=jnp.float32)
    elif router == "experts_choose":
        routing_module = ff_routing.ExpertsChooseMaskedRouter(
            router_weights=weights, jitter_noise=0.0, ignore_padding_tokens=False, dtype=jnp.float32)
    else:
        raise ValueError(f"router must be tokens_choose_masked, tokens_choose_scatter or experts_choose, not {router!r}")
    expert = ff_dense.MlpBlock(use_bias=False, intermediate_dim=mlp_dim, activations=("gelu", "linear"),
                               intermediate_dropout_rate=0.0, final_dropout_rate=0.0, dtype=jnp.float32)
    module = MoeForTraining(
        num_experts=num_experts, num_expert_partitions=num_expert_partitions, num_model_partitions=num_model_partitions,
        max_group_size=max_group_size, router=routing_module, train_capacity_factor=capacity_factor,
        eval_capacity_factor=capacity_factor, expert=expert, dropout_rate=0.0, dtype=jnp.float32, split_params=True,
    )
    inputs = [InputSpec("inputs", (batch, length, emb_dim), "float32", ("batch", "length", "embed"))]

    def loss(y, x):
        return jnp.mean(y ** 2)

    return module, inputs, loss


# t5x/contrib/moe/partitioning.py standard_logical_axis_rules(activation_partitioning_dims=2,
# parameter_partitioning_dims=1): t5x/partitioning.py's rules for (2, 1), the MoE rules appended, 'batch' overridden to
# ('expert', 'data'); mesh ('data', 'expert', 'model')
_T5X_MOE_RULES = [
    ["batch", ["expert", "data"]], ["vocab", "model"], ["mlp", "model"], ["heads", "model"], ["kv", None],
    ["joined_kv", "model"], ["embed", "model"],
    ["relpos_buckets", None], ["abspos_buckets", None], ["length", None], ["layers", None], ["stack", None],
    ["mlp_activations", None],
    ["expert", "expert"], ["expert_mlp", "model"], ["expert_replicas", "data"], ["unmodeled", None],
]
AUTHORS_RULES["flaxformer_moe"] = _T5X_MOE_RULES
AUTHORS_MESH_AXES["flaxformer_moe"] = ("data", "expert", "model")
AUTHORS_MESH_AXES["maxtext"] = tuple(maxtext_base.MESH_AXES)


# ---------------------------------------------------------------------------------------------------------------
# maxdiffusion LTX-Video (AI-Hypercomputer/maxdiffusion models/ltx_video): Linen DiT blocks, nn.with_logical_partitioning
# on DenseGeneral/RMSNorm/scale-shift tables; blocks stacked by RepeatableLayer = nn.scan(metadata_params={PARTITION_NAME:
# "layers"}, partitioning.ScanIn in apply) over nn.remat(policy=checkpoint_dots_with_no_batch_dims); 3-D and 4-D
# nn.with_logical_constraint (incl. one on a constant: the sinusoidal frequencies); ltx_video.yml's rules and
# ('data', 'fsdp', 'context', 'tensor') mesh.

from .maxdiffusion_ltx import transformer3d as ltx_transformer3d  # noqa: E402


class LTXVideoForTraining(ltx_transformer3d.Transformer3DModel):
    """maxdiffusion's ``Transformer3DModel`` with the pipeline's keyword inputs as positional ones (the authors' own
    ``init_weights`` passes the same six inputs by keyword)."""

    def __call__(self, hidden_states, indices_grid, encoder_hidden_states, timestep, segment_ids,
                 encoder_attention_segment_ids):
        return super().__call__(
            hidden_states, indices_grid, encoder_hidden_states=encoder_hidden_states, timestep=timestep,
            segment_ids=segment_ids, encoder_attention_segment_ids=encoder_attention_segment_ids,
        )


def make_maxdiffusion_ltx(
    num_layers: int = 2,
    num_attention_heads: int = 4,
    attention_head_dim: int = 16,
    in_channels: int = 16,
    caption_channels: int = 32,
    batch: int = 8,
    num_tokens: int = 16,
    caption_tokens: int = 8,
    gradient_checkpointing: str = "matmul_without_batch",
    dtype: str = "float32",
):
    """``ltxv-13B.json`` (rms_norm, rms qk_norm, gelu-approximate, rope, caption projection, cross-attention) scaled
    down; ``gradient_checkpointing`` as ``LTXVideoPipeline.load_transformer`` passes it (``"none"``: no
    ``nn.remat``; ``"full"``: ``nn.remat`` with no policy). ``sharding_mesh`` stays None: with a mesh the blocks call
    a Pallas TPU flash-attention kernel under ``shard_map``; without a TPU the authors' ``Attention`` picks
    ``ExplicitAttention``, which requires no mesh."""
    inner_dim = num_attention_heads * attention_head_dim
    module = LTXVideoForTraining(
        num_attention_heads=num_attention_heads, attention_head_dim=attention_head_dim, out_channels=in_channels,
        num_layers=num_layers, dropout=0.0, cross_attention_dim=inner_dim, attention_bias=True,
        activation_fn="gelu-approximate", num_embeds_ada_norm=1000, only_cross_attention=False,
        double_self_attention=False, upcast_attention=False, norm_elementwise_affine=False, norm_eps=1e-6,
        attention_type="default", caption_channels=caption_channels, qk_norm="rms_norm",
        standardization_norm="rms_norm",
        positional_embedding_type="rope", positional_embedding_theta=10000.0,
        positional_embedding_max_pos=[20, 2048, 2048], timestep_scale_multiplier=1000, dtype=jnp.dtype(dtype),
        gradient_checkpointing=gradient_checkpointing, sharding_mesh=None,
    )
    data = (("data", "fsdp", "context", "tensor"),)  # ltx_video.yml data_sharding: the batch over every mesh axis
    inputs = [
        InputSpec("hidden_states", (batch, num_tokens, in_channels), "float32", data + (None, None)),
        InputSpec("indices_grid", (batch, 3, num_tokens), "float32", data + (None, None)),
        InputSpec("encoder_hidden_states", (batch, caption_tokens, caption_channels), "float32", data + (None, None)),
        InputSpec("timestep", (batch, num_tokens), "float32", data + (None,)),
        InputSpec("segment_ids", (batch, num_tokens), "float32", data + (None,)),
        InputSpec("encoder_attention_segment_ids", (batch, caption_tokens), "float32", data + (None,)),
    ]

    def loss(noise_pred, hidden_states, *rest):
        return jnp.mean((noise_pred.astype(jnp.float32) - hidden_states) ** 2)

    return module, inputs, loss


# maxdiffusion src/maxdiffusion/configs/ltx_video.yml: mesh_axes and logical_axis_rules, verbatim
AUTHORS_MESH_AXES["maxdiffusion_ltx"] = ("data", "fsdp", "context", "tensor")
AUTHORS_RULES["maxdiffusion_ltx"] = [
    ["batch", "data"], ["activation_heads", "fsdp"], ["activation_batch", "data"], ["activation_kv", "tensor"],
    ["mlp", "tensor"], ["embed", "fsdp"], ["heads", "tensor"], ["norm", "fsdp"], ["conv_batch", ["data", "fsdp"]],
    ["out_channels", "tensor"], ["conv_out", "fsdp"], ["conv_in", "fsdp"],
]
AUTHORS_INPUT_SPECS["maxdiffusion_ltx"] = {
    name: (("data", "fsdp", "context", "tensor"),) + (None,) * rank
    for name, rank in (("hidden_states", 2), ("indices_grid", 2), ("encoder_hidden_states", 2), ("timestep", 1),
                       ("segment_ids", 1), ("encoder_attention_segment_ids", 1))
}


# ---------------------------------------------------------------------------------------------------------------
# NNX (e): bonsai Qwen3 (jax-ml/bonsai bonsai/models/qwen3): kernel/embedding/scale_metadata={'out_sharding': P(...)}
#          from the authors' ShardConfig (mesh axis names "fsdp"/"tp"); activations through out_sharding= on
#          Einsum/Linear calls and the embedding gather, and jax.sharding.reshard (the authors' shard() helper) on the
#          left-pad counts; a kv cache (zeros, no weights) the attention writes into and reads back. Explicit axes.

from .bonsai_qwen3 import modeling as qwen3_modeling  # noqa: E402


class BonsaiQwen3LM(qwen3_modeling.Qwen3):
    """bonsai's ``Qwen3`` with its kv cache built inside the call (the authors' ``init_cache``, float32 as in their
    sharding test; ``generate_steps=0``: cache length = sequence length, a prefill) and ``segment_ids`` positional."""

    def __call__(self, tokens, segment_ids):
        batch, length = tokens.shape
        cache = qwen3_modeling.init_cache(self.config, batch, length, 0, jnp.float32)
        return super().__call__(tokens, cache=cache, segment_ids=segment_ids)


def make_bonsai_qwen3(
    num_layers: int = 2,
    vocab_size: int = 128,
    emb_dim: int = 64,
    mlp_dim: int = 128,
    num_heads: int = 8,
    head_dim: int = 16,
    num_kv_heads: int = 4,
    batch: int = 8,
    length: int = 16,
    fsdp_axis: str = "data",
    tp_axis: str = "model",
    sharded: bool = True,
):
    """Config shaped like ``ModelConfig.qwen3_0_6b`` (GQA, q/k RMSNorm, RoPE), scaled down.

    The authors' ``ShardConfig.default(use_fsdp=True, use_tp=True)`` names the mesh axes "fsdp" and "tp" (their
    sharding test: an Explicit (4, 2) mesh with those names); this factory renames them to ``fsdp_axis`` and
    ``tp_axis``. Its specs shard ``emb_dim`` over ``tp_axis`` and the head axes of the q/k/v kernels over
    ``fsdp_axis``, the o kernel's heads and the q/k/v activations' head axes over ``tp_axis``: ``num_heads`` and
    ``num_kv_heads`` must divide by both axes' sizes. ``sharded=False``: ``ShardConfig.no_sharding()``.
    """
    shd = qwen3_modeling.ShardConfig.no_sharding()
    if sharded:
        default = qwen3_modeling.ShardConfig.default(use_fsdp=True, use_tp=True)
        names = {qwen3_modeling.ShardMode.FSDP.value: fsdp_axis, qwen3_modeling.ShardMode.TP.value: tp_axis}
        shd = qwen3_modeling.ShardConfig(
            **{f.name: _rename_axes(getattr(default, f.name), names) for f in dataclasses.fields(default)}
        )
    config = qwen3_modeling.ModelConfig(
        num_layers=num_layers, vocab_size=vocab_size, emb_dim=emb_dim, mlp_dim=mlp_dim, num_heads=num_heads,
        head_dim=head_dim, num_kv_heads=num_kv_heads, rope_theta=1_000_000, rope_scaling_factor=8.0,
        local_rope_theta=1e4, norm_eps=1e-6, tie_word_embeddings=False, shd_cfg=shd,
    )
    inputs = [
        InputSpec("tokens", (batch, length), "int32", None),
        InputSpec("segment_ids", (batch, length), "int32", None),
    ]

    def loss(logits, tokens, segment_ids):
        # next-token one-hot cross-entropy (logits are sharded over the vocabulary: see make_flax_gemma's loss)
        one_hot = jax.nn.one_hot(tokens[:, 1:], logits.shape[-1], dtype=jnp.float32)
        return -jnp.mean(jnp.sum(one_hot * nnx.log_softmax(logits[:, :-1].astype(jnp.float32)), axis=-1))

    return (lambda: BonsaiQwen3LM(config, rngs=nnx.Rngs(0))), inputs, loss


AUTHORS_RULES["bonsai_qwen3"] = []  # mesh axis names, no logical names
AUTHORS_MESH_AXES["bonsai_qwen3"] = ("fsdp", "tp")
# the authors' sharding test: tokens and segment ids P(fsdp); "data" is the factory's fsdp_axis
AUTHORS_INPUT_SPECS["bonsai_qwen3"] = {"tokens": ("data", None), "segment_ids": ("data", None)}
