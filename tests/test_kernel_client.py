"""The renderer's kernel client (moeroof.present.kernel_client): a wait for a message polls again
every slice, so a poll that missed its wake-up costs a slice, not the whole wait; Empty comes only
once the whole timeout has passed."""

from __future__ import annotations

import asyncio
import time
from queue import Empty

import pytest
import zmq
import zmq.asyncio
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session

from moeroof.present import kernel_client
from moeroof.present.kernel_client import SlicedChannel, SlicedKernelClient, SlicedKernelManager


class _MissesFirstWakeUp(AsyncZMQSocketChannel):
    """A channel whose first poll does not wake for a message already queued (sleeps out its
    timeout, then says Empty), as the renderer's polls were seen to; later polls are the channel's."""

    missed = False

    async def get_msg(self, timeout=None):
        if not self.missed:
            self.missed = True
            await asyncio.sleep(timeout if timeout is not None else 3600)
            raise Empty
        return await super().get_msg(timeout=timeout)


class _Sliced(SlicedChannel, _MissesFirstWakeUp):
    pass


def _pair():
    ctx = zmq.asyncio.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    port = a.bind_to_random_port("tcp://127.0.0.1")
    b.connect(f"tcp://127.0.0.1:{port}")
    return ctx, a, b


async def _wait(channel_class, timeout, send=True):
    ctx, a, b = _pair()
    session = Session()
    try:
        if send:
            session.send(b, "execute_reply", {"status": "ok"})
            await asyncio.sleep(0.2)  # queued before the wait starts
        t = time.monotonic()
        try:
            msg = await channel_class(a, session).get_msg(timeout=timeout)
        except Empty:
            return None, time.monotonic() - t
        return msg, time.monotonic() - t
    finally:
        a.close(0)
        b.close(0)
        ctx.term()


def test_a_reply_a_poll_missed_is_read_at_the_next_slice(monkeypatch):
    monkeypatch.setattr(kernel_client, "POLL_SLICE_S", 0.2)
    msg, took = asyncio.run(_wait(_Sliced, timeout=30.0))
    assert msg is not None and msg["msg_type"] == "execute_reply" and msg["content"] == {"status": "ok"}
    assert took < 2.0
    # the plain channel's one poll for the whole wait would have missed it to the end
    plain, took_plain = asyncio.run(_wait(_MissesFirstWakeUp, timeout=1.0))
    assert plain is None and took_plain >= 1.0


def test_empty_only_once_the_whole_timeout_has_passed(monkeypatch):
    monkeypatch.setattr(kernel_client, "POLL_SLICE_S", 0.1)
    msg, took = asyncio.run(_wait(SlicedChannel, timeout=0.55, send=False))
    assert msg is None and 0.55 <= took < 1.5


def test_the_manager_makes_sliced_clients():
    km = SlicedKernelManager()
    kc = km.client()
    assert isinstance(kc, SlicedKernelClient)
    assert kc.shell_channel_class is SlicedChannel and kc.iopub_channel_class is SlicedChannel


@pytest.mark.parametrize("timeout", [None, 0.3])
def test_a_queued_message_comes_at_once(monkeypatch, timeout):
    monkeypatch.setattr(kernel_client, "POLL_SLICE_S", 0.1)
    msg, took = asyncio.run(_wait(SlicedChannel, timeout=timeout))
    assert msg is not None and took < 0.5
