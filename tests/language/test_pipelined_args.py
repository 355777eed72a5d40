"""T.Pipelined arguments (CPU only)."""
import warnings

import pytest

import tilex.language as T


def test_explicit_schedule_is_recorded_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T.Pipelined(8, num_stages=2, order=[1, 0], stage=[0, 1])


def test_unsupported_arguments_raise():
    with pytest.raises(NotImplementedError, match=r"T.Pipelined\(group="):
        T.Pipelined(8, num_stages=2, group=[[0], [1]])
