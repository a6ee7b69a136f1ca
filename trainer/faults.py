"""Deliberate breaks, for the tests only (`train.py --fault ...`): proof that a broken run cannot pass the smoke
test. The recipe (train.py) calls in here at every step; without --fault nothing here does anything."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from torch import nn

FAULTS = ("zero-grads", "frozen-convs", "error@RANK")


@dataclass(frozen=True)
class Fault:
    """A deliberate break: none by default."""

    kind: str | None = None   # zero-grads: no parameter learns; frozen-convs: only biases and the last layer do;
    rank: int | None = None   # error: this rank raises at its first step


def parse_fault(text: str | None) -> Fault:
    if not text:
        return Fault()
    if text in ("zero-grads", "frozen-convs"):
        return Fault(text)
    kind, _, rank = text.partition("@")
    if kind == "error" and rank.isdigit():
        return Fault("error", int(rank))
    raise argparse.ArgumentTypeError(f"unknown fault {text!r}: one of {', '.join(FAULTS)}")


def raise_if_due(fault: Fault, rank: int, step: int) -> None:
    """error@RANK: that rank fails at its first step, the way a crashed rank would."""
    if fault.kind == "error" and fault.rank == rank:
        raise RuntimeError(f"injected fault on rank {rank} at step {step} (--fault error@{fault.rank})")


def break_gradients(net: nn.Module, fault: Fault) -> None:
    """After the backward pass: zero-grads zeroes every gradient, frozen-convs the convolutions' weights'."""
    if fault.kind not in ("zero-grads", "frozen-convs"):
        return
    broken = (net.parameters() if fault.kind == "zero-grads"
              else (m.weight for m in net.modules() if isinstance(m, nn.Conv2d)))
    for parameter in broken:
        if parameter.grad is not None:
            parameter.grad.zero_()
