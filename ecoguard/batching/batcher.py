"""The Batcher: coalesce concurrent, compatible ``generate`` calls on one model into one call.

Design (leader/follower, no worker thread): the first eligible caller for a compatibility key
opens a *group* and becomes its leader. It waits on the group's condition for at most
``max_wait_ms`` (less if the group fills up or the batcher closes), seals the group, then runs the
batched ``generate`` on its own thread. Callers arriving while the group is open join it as
followers and block on a future until the leader hands them their slice. Running on the callers'
own threads keeps the thread count what the application chose, keeps each caller's context
(context variables, CUDA stream, the guard's depth counter) on the thread that runs the call, and
means nothing can deadlock waiting for a worker that is busy. Leaders of different groups run
concurrently, as the same calls would without batching.

Failure handling: a call that is not eligible (``keys.prepare`` says why) runs alone, untouched.
If the batched call raises, or cutting the result apart fails, the leader re-runs its own call
alone and tells each follower to do the same on its own thread: only a caller whose own input is
bad fails. ``close()`` seals every open group and waits (at most ``timeout_s``) until every caller
inside the batcher has its result; calls made after ``close()`` run alone.

Fork: a forked child has only the thread that forked, so the callers the parent had inside a
batcher never leave it there. Every batcher is re-armed in the child (fresh lock, no open groups,
nobody in flight, no thread pool) by the ``batching`` fork hook (:mod:`ecoguard.forking`),
registered when the first batcher is made; ``close()`` and new calls in the child never wait for
the parent's callers.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ecoguard.batching import stats
from ecoguard.batching.keys import Prepared, prepare
from ecoguard.batching.merge import pad_left, split
from ecoguard.errors import UsageError
from ecoguard.faults import record_fault
from ecoguard.forking import register_fork_hooks

_log = logging.getLogger("ecoguard.batching")

# How long close() waits by default for the callers inside the batcher to get their results. A
# batched generate can take a while; past this, close() returns anyway (logged and counted) and
# those callers still finish on their own threads, each with its result.
CLOSE_TIMEOUT_S = 30.0

# True while a batcher executes a generate call on this context: a generate reached from inside
# it (the guard's wrapper around ``model.generate``, a nested call) must not be coalesced again.
INSIDE_BATCH: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ecoguard_batching_inside", default=False
)

# Rows of the batch that this context's last coalesced call ran in (None: it ran alone). The
# guard reads it so the call's record carries the batch size the GPU actually ran.
BATCH_ROWS: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "ecoguard_batching_rows", default=None
)

Runner = Callable[..., Any]
# An invocation: (run, args, kwargs, callers, rows) -> result. A seam for tests and for a caller
# that wants to wrap each executed generate call (the default just calls ``run``).
Invoker = Callable[[Runner, tuple, dict, int, int], Any]


class _RunAlone:
    """Sent to a follower whose batch failed: it re-runs its own call alone, on its own thread."""


_RUN_ALONE = _RunAlone()


@dataclass(eq=False, slots=True)
class _Pending:
    prepared: Prepared
    run: Runner
    args: tuple
    kwargs: dict
    future: Future = field(default_factory=Future)


@dataclass(eq=False, slots=True)
class _Group:
    key: tuple
    ready: threading.Condition
    members: list[_Pending] = field(default_factory=list)
    rows: int = 0
    sealed: bool = False


class Batcher:
    """Coalesces concurrent compatible ``generate`` calls on ``model``.

    ``max_batch_size`` caps the sequences (prompt rows x ``num_return_sequences``) in one batched
    call; ``max_wait_ms`` is the longest a call waits for partners before it runs (0: never wait,
    so only calls that arrive while a group is still forming share it).
    """

    def __init__(
        self,
        model: Any,
        *,
        max_batch_size: int = 16,
        max_wait_ms: float = 10.0,
        _invoke: Invoker | None = None,
        _weak_model: bool = False,
    ) -> None:
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int):
            raise UsageError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
        if not 1 <= max_batch_size <= 1024:
            raise UsageError(f"max_batch_size must be 1 to 1024, got {max_batch_size!r}")
        if (
            isinstance(max_wait_ms, bool)
            or not isinstance(max_wait_ms, (int, float))
            or not math.isfinite(max_wait_ms)
            or not 0 <= max_wait_ms <= 60_000
        ):
            raise UsageError(f"max_wait_ms must be a number from 0 to 60000, got {max_wait_ms!r}")
        if not callable(getattr(model, "generate", None)):
            raise UsageError(f"Batcher needs a model with a generate method, got {type(model)!r}")
        # The guard's registry keys batchers weakly by model, so its batchers must not keep the
        # model alive; a Batcher made by a user holds its model like any other attribute.
        self._model_ref: Callable[[], Any] = (
            weakref.ref(model) if _weak_model else (lambda model=model: model)
        )
        self.max_batch_size = max_batch_size
        self.max_wait_ms = float(max_wait_ms)
        self._invoke_fn: Invoker = _invoke or _plain_invoke
        self._lock = threading.Lock()
        self._open: dict[tuple, _Group] = {}
        self._inflight = 0  # callers inside the coalescing path, for close() to drain
        # Notified whenever _inflight changes: close() waits on it for zero (and a test can wait
        # for callers to arrive without polling).
        self._inflight_changed = threading.Condition(self._lock)
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        _watch(self)

    # -- public API ---------------------------------------------------------------------------

    @property
    def model(self) -> Any:
        return self._model_ref()

    @property
    def closed(self) -> bool:
        return self._closed

    def generate(self, input_ids: Any = None, attention_mask: Any = None, **generate_kwargs: Any):
        """Same arguments and result as ``model.generate`` for this caller alone."""
        kwargs = dict(generate_kwargs)
        if input_ids is not None:
            kwargs["input_ids"] = input_ids
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        model = self.model
        if model is None:
            raise RuntimeError("the model this Batcher served has been garbage-collected")
        return self.submit(model.generate, (), kwargs)

    async def agenerate(
        self, input_ids: Any = None, attention_mask: Any = None, **generate_kwargs: Any
    ):
        """``generate`` for asyncio code: the blocking call runs on the batcher's own thread pool
        (sized for ``2 x max_batch_size`` waiting callers, so the default executor's small pool
        does not cap how many requests can share a batch) while the event loop keeps running."""
        call = functools.partial(
            contextvars.copy_context().run,
            self.generate,
            input_ids,
            attention_mask,
            **generate_kwargs,
        )
        executor = self._get_executor()
        if executor is None:  # closed: run alone on the default executor
            return await asyncio.to_thread(call)
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    def close(self, timeout_s: float | None = CLOSE_TIMEOUT_S) -> bool:
        """Stop waiting for partners, let every pending call finish, then shut down.

        Waits at most ``timeout_s`` seconds (None: as long as it takes) for the callers inside
        the batcher; returns True when they all had their results, False when the wait ran out
        (logged and counted as fault ``batching.close``: those callers still finish, on their own
        threads). Safe to call twice. Calls made afterwards run alone."""
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            self._closed = True
            for group in list(self._open.values()):
                self._seal(group)
            while self._inflight:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._inflight_changed.wait(remaining)
            left = self._inflight
            executor, self._executor = self._executor, None
        if left:
            record_fault("batching.close", TimeoutError(f"{left} caller(s) still inside"))
            _log.warning(
                "ecoguard: a batcher closed with %d call(s) still running after %.1f s; they "
                "finish on their own threads",
                left,
                timeout_s,
            )
        if executor is not None:
            executor.shutdown(wait=not left)
        return not left

    def _rearm_in_child(self) -> None:
        """In a forked child: the parent's callers (and the pool's threads) are not here, so
        forget them; a lock a parent thread held at the fork is replaced. The batcher stays
        open (or closed) as it was, so the child's own calls coalesce as before."""
        self._lock = threading.Lock()
        self._inflight_changed = threading.Condition(self._lock)
        self._open = {}
        self._inflight = 0
        self._executor = None

    def __enter__(self) -> Batcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the coalescing path ------------------------------------------------------------------

    def submit(self, run: Runner, args: tuple, kwargs: dict) -> Any:
        """Run ``run(*args, **kwargs)`` (a ``generate``), coalesced with concurrent compatible
        calls when possible. ``run`` is the callable used if this caller leads the batch."""
        if INSIDE_BATCH.get():
            return run(*args, **kwargs)  # nested under a call this batcher already runs
        model = self.model
        try:
            prepared = prepare(model, args, kwargs) if model is not None else "model-gone"
        except Exception as exc:  # ecoguard must never break the user's call
            record_fault("batching.prepare", exc)
            prepared = "prepare-error"
        if isinstance(prepared, str):
            stats.note_alone(prepared)
            return self._invoke_fn(run, args, kwargs, 1, 0)
        if self._closed:
            stats.note_alone("closed")
            return self._invoke_fn(run, args, kwargs, 1, prepared.rows)
        if prepared.rows >= self.max_batch_size:
            stats.note_batch(1, prepared.rows)
            return self._invoke_fn(run, args, kwargs, 1, prepared.rows)

        pending = _Pending(prepared, run, args, kwargs)
        with self._lock:
            if self._closed:
                group = None
            else:
                self._inflight += 1
                self._inflight_changed.notify_all()
                group = self._join_or_lead(pending)
        if group is None:
            stats.note_alone("closed")
            return self._invoke_fn(run, args, kwargs, 1, prepared.rows)
        try:
            if group.members[0] is pending:
                result = self._lead(group)
            else:
                result = pending.future.result()
                if result is _RUN_ALONE:
                    return self._invoke_fn(run, args, kwargs, 1, prepared.rows)
            BATCH_ROWS.set(group.rows)
            return result
        finally:
            with self._lock:
                self._inflight -= 1
                self._inflight_changed.notify_all()

    def _join_or_lead(self, pending: _Pending) -> _Group:
        """Under the lock: join the open group for this key, or open one and wait as its leader.

        Returns the group; the caller is its leader when it is ``members[0]``."""
        rows = pending.prepared.rows
        group = self._open.get(pending.prepared.key)
        if group is not None and group.rows + rows <= self.max_batch_size:
            group.members.append(pending)
            group.rows += rows
            if group.rows >= self.max_batch_size:
                self._seal(group)
            return group
        if group is not None:
            self._seal(group)  # this call does not fit: let the full-enough group go now
        group = _Group(key=pending.prepared.key, ready=threading.Condition(self._lock))
        group.members.append(pending)
        group.rows = rows
        self._open[group.key] = group
        deadline = time.monotonic() + self.max_wait_ms / 1000.0
        while not group.sealed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            group.ready.wait(remaining)
        self._seal(group)
        return group

    def _seal(self, group: _Group) -> None:
        """Under the lock: no one else may join; wake the leader if it is waiting."""
        group.sealed = True
        if self._open.get(group.key) is group:
            del self._open[group.key]
        group.ready.notify_all()

    def _lead(self, group: _Group) -> Any:
        """Run the sealed group on this (the leader's) thread; hand followers their results."""
        leader, followers = group.members[0], group.members[1:]
        try:
            if not followers:
                stats.note_batch(1, leader.prepared.rows)
                return self._invoke_fn(
                    leader.run, leader.args, leader.kwargs, 1, leader.prepared.rows
                )
            results = self._run_batch(group)
            if results is None:  # the batch failed: everyone runs alone
                return self._invoke_fn(
                    leader.run, leader.args, leader.kwargs, 1, leader.prepared.rows
                )
            for member, result in zip(followers, results[1:], strict=True):
                member.future.set_result(result)
            return results[0]
        finally:
            # Whatever happened (even KeyboardInterrupt), no follower may wait forever.
            for member in followers:
                if not member.future.done():
                    member.future.set_result(_RUN_ALONE)

    def _run_batch(self, group: _Group) -> list[Any] | None:
        """One batched generate for the group; each member's result, or None if it failed."""
        members = group.members
        prepared = [m.prepared for m in members]
        try:
            input_ids, attention_mask = pad_left(prepared)
        except Exception as exc:
            record_fault("batching.pad", exc)
            stats.note_fallback(len(members))
            return None
        kwargs = dict(prepared[0].kwargs)
        kwargs["input_ids"] = input_ids
        kwargs["attention_mask"] = attention_mask
        try:
            output = self._invoke_fn(members[0].run, (), kwargs, len(members), group.rows)
        except Exception:
            # Most likely one caller's input (a token id outside the vocabulary...): re-running
            # each alone confines the error to that caller.
            stats.note_fallback(len(members))
            return None
        try:
            results = split(output, prepared)
        except Exception as exc:
            record_fault("batching.split", exc)
            stats.note_fallback(len(members))
            return None
        stats.note_batch(len(members), group.rows)
        return results

    def _get_executor(self) -> ThreadPoolExecutor | None:
        with self._lock:
            if self._closed:
                return None
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=max(4, 2 * self.max_batch_size),
                    thread_name_prefix="ecoguard-batcher",
                )
            return self._executor


# Every batcher made in this process, re-armed in a forked child (weakly: a batcher the
# application dropped is not kept alive for that).
_live: weakref.WeakSet[Batcher] = weakref.WeakSet()


def _watch(batcher: Batcher) -> None:
    _live.add(batcher)
    register_fork_hooks("batching", after_in_child=_after_fork_in_child)


def _after_fork_in_child() -> None:
    for batcher in list(_live):
        try:
            batcher._rearm_in_child()
        except Exception as exc:  # a fork hook must not raise
            record_fault("batching.fork", exc)


def _plain_invoke(run: Runner, args: tuple, kwargs: dict, callers: int, rows: int) -> Any:
    """Call ``run`` with the inside-a-batch flag set, so a guard wrapper around ``run`` passes the
    call straight through instead of coalescing it again."""
    token = INSIDE_BATCH.set(True)
    try:
        return run(*args, **kwargs)
    finally:
        INSIDE_BATCH.reset(token)
