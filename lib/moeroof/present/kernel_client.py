"""The renderer's kernel client: a wait for a kernel's message polls again every second.

Renders of the notebooks side by side (``--jobs 2``) were seen to hang: the kernel sat idle in
its event loop, every thread waiting for a message (:mod:`moeroof.present.kernel_watch` read
them: ``do_epoll_wait``; faulthandler's stacks: the main thread in its selector), while papermill
waited for the reply to the cell it had sent — in whatif, whose cells open widgets
(jupyter/nbclient#312 reports cells holding widgets that sometimes block the same way). The
client's wait was one ``await socket.poll(timeout)`` for the whole cell timeout
(``jupyter_client``'s ``AsyncZMQSocketChannel.get_msg``). :class:`SlicedChannel` waits the same
total time in slices of :data:`POLL_SLICE_S`, each a fresh poll, and the hang went: whatif and
union_curve rendered side by side on the 2-core VM under a load of 7–10, alternating the two
clients, hung 5 times in 38 renders with the plain client and never in 38 with this one (and
never in 29 more renders with it, where 3 times in 11 before; 2026-12-07). Which wake-up the one
long poll missed is not pinned down: a check after every
empty slice never found a message already queued. Its answer and its ``Empty`` (only once the
whole timeout has passed) are the channel's own.
"""

from __future__ import annotations

import time
import typing as t
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

__all__ = ["POLL_SLICE_S", "SlicedChannel", "SlicedKernelClient", "SlicedKernelManager"]

#: seconds of one poll of a channel before it polls again
POLL_SLICE_S = 1.0


class SlicedChannel(AsyncZMQSocketChannel):
    """A channel whose :meth:`get_msg` polls in slices of :data:`POLL_SLICE_S` (module docstring)."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, t.Any]:  # type: ignore[override]
        """The next message, waiting at most ``timeout`` seconds (None: without end); ``Empty`` after that."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            step = POLL_SLICE_S if end is None else min(POLL_SLICE_S, max(0.0, end - time.monotonic()))
            try:
                return await super().get_msg(timeout=step)
            except Empty:
                if end is not None and time.monotonic() >= end:
                    raise


class SlicedKernelClient(AsyncKernelClient):
    """An async kernel client whose shell and IOPub channels are :class:`SlicedChannel`."""

    shell_channel_class = Type(SlicedChannel)
    iopub_channel_class = Type(SlicedChannel)


class SlicedKernelManager(AsyncKernelManager):
    """The kernel manager the renderer starts kernels with: its clients are :class:`SlicedKernelClient`."""

    client_class = DottedObjectName("moeroof.present.kernel_client.SlicedKernelClient")
    client_factory = Type(SlicedKernelClient)
