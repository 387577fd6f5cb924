"""The one warm-up schedule (common/core/schedules.py) gives each recipe's formula at every step."""
import math

import numpy as np
import pytest

from common.core import schedules

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def _values(schedule, n):
    return np.array([float(schedule(s)) for s in range(n)])


def test_resnet_warms_up_to_the_peak_at_its_last_step_then_cosine_to_zero():
    peak, warm, total = 0.256, 4, 12
    got = _values(schedules.cosine(peak, warm, total, offset=1.0), total + 2)
    want = [peak * (s + 1) / warm if s < warm
            else 0.5 * peak * (1 + math.cos(math.pi * min(s - warm, total - warm) / (total - warm)))
            for s in range(total + 2)]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)  # float32
    assert got[warm - 1] == pytest.approx(peak) and got[-1] == 0


def test_ssd_warms_up_from_a_fraction_of_the_peak():
    peak, warm, total, start = 0.16, 5, 20, 0.43332 * 0.16
    got = _values(schedules.cosine(peak, warm, total, warmup_start=start), total)
    want = [start + (peak - start) * s / warm if s < warm
            else 0.5 * peak * (1 + math.cos(math.pi * (s - warm) / (total - warm)))
            for s in range(total)]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)  # float32


def test_transformer_xl_ends_its_cosine_at_a_tenth_of_the_peak():
    peak, warm, total = 0.01, 3, 10
    got = _values(schedules.cosine(peak, warm, total, final=0.1 * peak), total + 3)
    assert got[0] == 0 and got[warm] == pytest.approx(peak)
    np.testing.assert_allclose(got[total:], 0.1 * peak, rtol=1e-6)  # and stays there


def test_step_decay_divides_by_ten_three_times():
    got = _values(schedules.steps(1.0, 0, 90), 90)  # boundaries 30, 60, 80 belong to the left
    assert [got[30], got[31], got[61], got[81]] == pytest.approx([1.0, 0.1, 0.01, 0.001])
