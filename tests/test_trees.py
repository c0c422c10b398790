"""``refill``: the next call's values in the last call's input memory."""

from __future__ import annotations

import torch
from kforge.tools.trees import refill


def test_a_plain_tensor_takes_the_new_values_in_its_own_memory() -> None:
    old, new = torch.zeros(3, 4), torch.randn(3, 4)
    assert refill(old, new) is old and torch.equal(old, new)


def test_an_expanded_input_is_written_through_its_distinct_elements() -> None:
    old = torch.arange(5).expand(2, 5)
    new = (torch.arange(5) + 7).expand(2, 5)
    out = refill(old, new)
    assert out is old and old.stride() == (0, 1)  # the same memory and layout
    assert torch.equal(old, new)


def test_values_that_differ_along_an_expanded_dimension_come_back_in_new_memory() -> None:
    old = torch.arange(5).expand(2, 5)
    new = torch.stack([torch.arange(5), torch.arange(5) + 1])  # the rows differ: old cannot hold them
    out = refill(old, new)
    assert out is new and torch.equal(old, torch.arange(5).expand(2, 5))


def test_other_overlapping_layouts_come_back_in_new_memory() -> None:
    base = torch.arange(6.0)
    old = base.as_strided((3, 3), (1, 1))  # windows that overlap, no zero stride
    new = torch.randn(3, 3)
    assert refill(old, new) is new


def test_views_of_dense_tensors_are_written_in_place() -> None:
    base = torch.zeros(4, 6, 8)
    for view in (base.permute(2, 0, 1), base[:, ::2, 1:5], base.transpose(0, 1)[1:3]):
        new = torch.randn(view.shape)
        assert refill(view, new) is view and torch.equal(view, new)
