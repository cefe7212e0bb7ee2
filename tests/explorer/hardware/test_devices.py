"""The simulated CPU devices (``explorer/hardware/devices.py``): how many are asked for, and one message for a bad count."""

import jax
import pytest

from explorer.hardware import devices
from explorer.errors import ExplorerError


def test_the_count_comes_from_the_environment_else_eight(monkeypatch):
    monkeypatch.delenv(devices.DEVICES_ENV, raising=False)
    assert devices.requested_cpu_devices() == devices.DEFAULT_CPU_DEVICES == 8
    monkeypatch.setenv(devices.DEVICES_ENV, "16")
    assert devices.requested_cpu_devices() == 16


@pytest.mark.parametrize("raw", ["eight", "0", "513", "-4", "2.5"])
def test_a_bad_count_is_one_message_naming_the_variable_and_the_value(monkeypatch, raw):
    monkeypatch.setenv(devices.DEVICES_ENV, raw)
    with pytest.raises(ExplorerError) as caught:
        devices.requested_cpu_devices()
    assert caught.value.field == devices.DEVICES_ENV and raw in str(caught.value)


def test_configure_once_the_backend_is_up_keeps_the_devices_it_has():
    count = jax.device_count()  # the suite's backend is up with the conftest's devices
    devices.configure(2)
    assert jax.device_count() == count
    with pytest.raises(ExplorerError):
        devices.configure(0)  # --devices out of range: refused before anything else
    assert devices.describe()["count"] == count
