"""tilex.autotuner.devices: which GPUs time configurations, and the work queue that spreads items over them."""
import contextlib
import threading
import time

import pytest

from tilex.autotuner import devices as D


def _no_bind(dev):
    return contextlib.nullcontext()


def test_run_on_devices_keeps_item_order_and_uses_every_device():
    seen = {}
    lock = threading.Lock()

    def fn(item, dev):
        time.sleep(0.01)
        with lock:
            seen.setdefault(dev, []).append(item)
        return item * item

    out = D.run_on_devices(range(20), fn, [0, 1, 2], bind=_no_bind)
    assert out == [i * i for i in range(20)]
    assert sorted(seen) == [0, 1, 2]
    assert sorted(sum(seen.values(), [])) == list(range(20))


def test_run_on_devices_pulls_work_so_a_slow_item_does_not_hold_the_rest():
    order = []

    def fn(item, dev):
        time.sleep(0.3 if item == 0 else 0.01)
        order.append((item, dev))
        return dev

    out = D.run_on_devices(range(11), fn, [0, 1], bind=_no_bind)
    # the thread that took item 0 is busy for 0.3 s; the other one does the ten short items meanwhile
    assert out.count(out[0]) == 1


def test_run_on_devices_single_device_runs_inline():
    threads = set()

    def fn(item, dev):
        threads.add(threading.current_thread().name)
        return dev

    assert D.run_on_devices([1, 2, 3], fn, [5], bind=_no_bind) == [5, 5, 5]
    assert threads == {threading.current_thread().name}


def test_run_on_devices_reraises_the_first_error():
    def fn(item, dev):
        if item == 3:
            raise RuntimeError("config 3 broke")
        return item

    with pytest.raises(RuntimeError, match="config 3 broke"):
        D.run_on_devices(range(8), fn, [0, 1], bind=_no_bind)
    with pytest.raises(ValueError, match="no devices"):
        D.run_on_devices([1], fn, [], bind=_no_bind)


@pytest.fixture
def fake_gpus(monkeypatch):
    import torch

    names = ["NVIDIA H200", "NVIDIA H200", "NVIDIA H100"]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(names))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: names[d])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return names


def test_bench_devices_default_is_every_gpu_of_the_current_model(fake_gpus):
    assert D.bench_devices() == [0, 1]
    assert D.bench_devices("all") == [0, 1]
    assert D.bench_devices(1) == [0]
    assert D.bench_devices([1, 0]) == [1, 0]


def test_bench_devices_refuses_bad_requests(fake_gpus):
    with pytest.raises(ValueError, match="4 but 3 GPU"):
        D.bench_devices(4)
    with pytest.raises(ValueError, match=r"\[7\] out of range"):
        D.bench_devices([0, 7])
    with pytest.raises(ValueError, match="mix GPU models"):
        D.bench_devices([0, 2])
    with pytest.raises(ValueError, match="empty"):
        D.bench_devices([])
    with pytest.raises(ValueError, match="devices must be"):
        D.bench_devices(True)
