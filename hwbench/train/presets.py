"""Model presets: a decoder-only transformer's sizes by name, its FLOPs per token and its memory.

FLOPs per token follow the convention of PaLM (Chowdhery et al. 2022, appendix B): 6 per
parameter of every matrix multiply (forward 2, backward 4; the LM head included, the embedding
lookup and the norms not), plus the attention scores and values, ``6 x layers x seq x d_model``
for causal attention (half of the full ``12 x``, as the causal kernels skip the masked half).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hwbench.core.errors import UserError

#: Bytes per parameter a run holds: fp32 weights, fp32 gradients, AdamW's two fp32 moments.
STATE_BYTES_PER_PARAM = 16
#: Activation bytes per token per layer per d_model kept for backward (attention, MLP, norms),
#: a generous bound for fp32 (bf16 autocast keeps less).
ACTIVATION_BYTES = 40


@dataclass(frozen=True)
class Preset:
    """The sizes of one model and its batch: a name users pass as ``--preset``."""

    name: str
    layers: int
    d_model: int
    heads: int
    seq: int
    batch: int
    vocab: int
    #: Learning rate of AdamW (cosine-free: constant after a short warm-up).
    lr: float
    about: str

    @property
    def d_ff(self) -> int:
        """The MLP's hidden width: 4 x d_model."""
        return 4 * self.d_model

    @property
    def params(self) -> int:
        """Trainable parameters: embedding (tied with the LM head), per layer attention, MLP and
        two norms (scale and bias), the final norm."""
        d = self.d_model
        per_layer = 4 * d * d + 4 * d + 2 * d * self.d_ff + self.d_ff + d + 4 * d
        return self.vocab * d + self.seq * d + self.layers * per_layer + 2 * d

    @property
    def matmul_params(self) -> int:
        """Parameters that multiply each token in a matrix product: every layer's four attention
        projections and two MLP matrices, and the LM head."""
        d = self.d_model
        return self.layers * (4 * d * d + 2 * d * self.d_ff) + d * self.vocab

    @property
    def flops_per_token(self) -> float:
        """Model FLOPs per token trained, forward and backward (PaLM's count, causal attention)."""
        return 6.0 * self.matmul_params + 6.0 * self.layers * self.seq * self.d_model

    def tokens_per_step(self, ranks: int) -> int:
        """Tokens one optimizer step trains on, all ranks together."""
        return self.batch * self.seq * ranks

    def memory_estimate(self) -> int:
        """Bytes one rank needs: parameters with their gradients and AdamW moments, the
        activations kept for backward, and the logits with their gradient."""
        state = self.params * STATE_BYTES_PER_PARAM
        tokens = self.batch * self.seq
        activations = tokens * self.layers * self.d_model * ACTIVATION_BYTES
        logits = tokens * self.vocab * 4 * 3
        return state + activations + logits

    def as_shape(self) -> dict[str, int]:
        """The record's shape keys of this preset."""
        return {k: v for k, v in asdict(self).items() if k in ("layers", "d_model", "heads", "seq", "batch", "vocab")}


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("micro", 2, 64, 2, 64, 16, 512, 1e-2, "2 layers x 64, 0.14 M parameters: a smoke test of seconds"),
        Preset("tiny", 4, 256, 4, 128, 8, 4096, 2e-3, "4 layers x 256, 4.2 M parameters: a CPU's minute"),
        Preset("small", 6, 512, 8, 256, 8, 8192, 1e-3, "6 layers x 512, 23 M parameters: a small GPU or a large CPU"),
        Preset("1b", 24, 2048, 16, 1024, 8, 32768, 3e-4, "24 layers x 2048, 1.3 B parameters: one data-centre GPU"),
    )
}
#: The preset a run takes when none is named: by the kind of the backend's device.
DEFAULT_PRESET = {"cpu": "tiny", "gpu": "small", "accelerator": "small"}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; UserError naming the known ones."""
    if name not in PRESETS:
        raise UserError(f"unknown preset '{name}'; known presets: {', '.join(PRESETS)} (see hwbench train --help)")
    return PRESETS[name]
