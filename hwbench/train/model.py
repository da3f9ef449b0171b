"""The decoder-only transformer the training workload trains, defined here (nothing downloaded).

GPT-2's layout: learned token and position embeddings, pre-norm blocks of causal self-attention
(``scaled_dot_product_attention``, which each backend routes to its fastest kernel) and a GELU
MLP, a final LayerNorm and an LM head tied to the token embedding. Weights are drawn from the
seeded generator only, so two runs with one seed start from the same model bit for bit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hwbench.train.presets import Preset

#: Standard deviation of the initial weights (GPT-2's 0.02; residual projections scaled by depth).
INIT_STD = 0.02


class Block(nn.Module):
    """One pre-norm transformer block: causal self-attention, then the MLP, each with a residual."""

    def __init__(self, preset: Preset) -> None:
        super().__init__()
        d = preset.d_model
        self.heads = preset.heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, preset.d_ff)
        self.out = nn.Linear(preset.d_ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (batch, seq, d_model) through the block."""
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, s, d))
        return x + self.out(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))


class Transformer(nn.Module):
    """The language model: token ids (batch, seq) to logits (batch, seq, vocab)."""

    def __init__(self, preset: Preset) -> None:
        super().__init__()
        self.preset = preset
        self.embed = nn.Embedding(preset.vocab, preset.d_model)
        self.position = nn.Embedding(preset.seq, preset.d_model)
        self.blocks = nn.ModuleList(Block(preset) for _ in range(preset.layers))
        self.norm = nn.LayerNorm(preset.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of the next token at every position."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm(x), self.embed.weight)


def build(preset: Preset, seed: int, device: torch.device) -> Transformer:
    """The model of ``preset`` with weights drawn from ``seed``, on ``device``."""
    generator = torch.Generator().manual_seed(seed)
    model = Transformer(preset)
    residual_std = INIT_STD / (2 * preset.layers) ** 0.5
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif ".norm" in name or name.startswith("norm"):
                param.fill_(1.0)
            else:
                std = residual_std if name.endswith(("proj.weight", "out.weight")) else INIT_STD
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    return model.to(device)


def loss_of(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting ``tokens[:, 1:]`` from ``tokens[:, :-1]``."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
