"""Hypothesis settings of the suite and the scale of its example counts."""
import os

from hypothesis import HealthCheck, settings


def load_hypothesis_profile():
    """Register the suite's default profile and load the one HYPOTHESIS_PROFILE names."""
    settings.register_profile(
        "default",
        deadline=None,
        max_examples=25,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def examples(n):
    """Hypothesis example count, scaled by SOBOLEV_TEST_SCALE (e.g. 10 for a long soak)."""
    return max(1, int(n * float(os.environ.get("SOBOLEV_TEST_SCALE", "1"))))
