"""Presets: their parameter and FLOP counts against the model torch builds, and bad names."""

from __future__ import annotations

import needs
import pytest

torch = needs.module("torch", "the training workload")

from hwbench.core.errors import UserError  # noqa: E402
from hwbench.train.model import build, loss_of  # noqa: E402
from hwbench.train.presets import PRESETS, get_preset  # noqa: E402


@pytest.mark.parametrize("name", ["micro", "tiny", "small"])
def test_the_parameter_count_is_the_models(name: str) -> None:
    preset = PRESETS[name]
    model = build(preset, seed=0, device=torch.device("cpu"))
    assert sum(p.numel() for p in model.parameters()) == preset.params


@pytest.mark.parametrize("name", ["micro", "tiny"])
def test_matmul_parameters_are_the_linear_layers_and_the_tied_head(name: str) -> None:
    preset = PRESETS[name]
    model = build(preset, seed=0, device=torch.device("cpu"))
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert preset.matmul_params == linear + preset.vocab * preset.d_model


def test_flops_per_token_counts_forward_and_backward_of_every_matmul() -> None:
    """PaLM's count: 6 per matmul parameter, plus causal attention's 6 x layers x seq x d_model."""
    p = PRESETS["tiny"]
    attention = 6 * p.layers * p.seq * p.d_model
    assert p.flops_per_token == 6 * p.matmul_params + attention
    # the forward pass's matmuls, counted from the shapes: 2 flops per multiply-add
    d, tokens = p.d_model, 1
    forward = tokens * (p.layers * (2 * d * 3 * d + 2 * d * d + 2 * 2 * d * p.d_ff) + 2 * d * p.vocab)
    assert 3 * forward == 6 * p.matmul_params


def test_one_seed_builds_one_model_and_another_seed_another() -> None:
    preset = PRESETS["micro"]
    a, b, c = (build(preset, seed=s, device=torch.device("cpu")) for s in (1, 1, 2))
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb), name
        if name.endswith("weight") and "norm" not in name:
            assert not torch.equal(pa, pc), name


def test_the_first_loss_is_that_of_a_uniform_guess() -> None:
    """Small initial weights: the first loss is near ln(vocab), the mark the loss must fall from."""
    import math

    preset = PRESETS["micro"]
    model = build(preset, seed=0, device=torch.device("cpu"))
    tokens = torch.randint(0, preset.vocab, (2, preset.seq + 1), generator=torch.Generator().manual_seed(0))
    assert abs(float(loss_of(model, tokens).detach()) - math.log(preset.vocab)) < 0.1


def test_an_unknown_preset_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(UserError, match="unknown preset 'huge'; known presets: micro, tiny, small, 1b"):
        get_preset("huge")


def test_the_1b_preset_is_a_billion_parameters_and_needs_tens_of_gib() -> None:
    p = PRESETS["1b"]
    assert 1.2e9 < p.params < 1.4e9
    assert p.memory_estimate() > 16 * p.params  # weights, gradients and AdamW moments at least
