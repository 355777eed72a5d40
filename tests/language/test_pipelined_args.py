"""T.Pipelined arguments (CPU only)."""
import pytest

import tilex.language as T


def test_explicit_schedule_warns_that_it_is_not_used():
    with pytest.warns(UserWarning, match="derives the pipeline schedule itself"):
        T.Pipelined(8, num_stages=2, order=[0, 1], stage=[0, 1])


def test_unsupported_arguments_raise():
    with pytest.raises(NotImplementedError, match="group=/sync="):
        T.Pipelined(8, num_stages=2, group=[[0], [1]])
