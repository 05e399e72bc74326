"""Ensembles as one network whose parameters carry a leading member axis ``[E, ...]`` (SPEC §5a, §5b baselines)."""

from __future__ import annotations

import torch
from torch import nn


def stack_members(net: nn.Module, target: nn.Module, members: list[nn.Module]) -> None:
    """Replace every parameter of ``net`` by the stack of the ``members``' ``[E, ...]`` (``members[0]`` may be
    ``net`` itself), and ``target``'s by a copy of that stack (each member's target starts as the member).

    Buffers stay ``net``'s and ``target``'s own (shared running statistics stay shared).
    """
    for name, _ in list(net.named_parameters()):
        stacked = torch.stack([member.get_parameter(name).detach() for member in members])
        _replace(net, name, nn.Parameter(stacked))
        _replace(target, name, nn.Parameter(stacked.clone(), requires_grad=False))


def _replace(net: nn.Module, name: str, value: nn.Parameter) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(net.get_submodule(owner), attr, value)
