"""Collate functions."""

from torchloom.collate.auto import CollateError, collate, collate_values, stack_tensors

__all__ = ["CollateError", "collate", "collate_values", "stack_tensors"]
