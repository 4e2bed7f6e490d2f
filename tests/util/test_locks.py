"""udr.util.locks: one writer per named thing, across real processes; a dead holder's lock is taken over."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest

from tests.locking import another_process_holding, start_holder
from udr.errors import UdrError
from udr.util.locks import holding, lock_file


def test_a_second_process_is_refused_in_one_line_naming_the_holders_pid(tmp_path):
    target = tmp_path / "ws"
    with another_process_holding(target) as pid:
        with pytest.raises(UdrError) as err, holding(target, "workspace"):
            pass
        message = str(err.value)
        assert f"pid {pid}" in message and "workspace" in message and str(target) in message
        assert len(message.splitlines()) == 1
        same = tmp_path / "x" / ".." / "ws"  # another spelling of the same path is the same lock
        with pytest.raises(UdrError, match=f"pid {pid}"), holding(same, "workspace"):
            pass
        with holding(tmp_path / "other", "workspace"):  # another name is free
            pass
    with holding(target, "workspace"):  # free again once the holder ended
        assert lock_file(target).read_text().strip() == str(os.getpid())
    assert not lock_file(target).exists()  # the holder deletes it
    with holding(tmp_path / "new" / "deep" / "ws", "workspace"):
        assert lock_file(tmp_path / "new" / "deep" / "ws").is_file()
    assert not (tmp_path / "new").exists()  # and the folders it made for it, left empty


def _try_lock(target, queue):
    try:
        with holding(target, "model folder"):
            queue.put("taken")
    except UdrError as exc:
        queue.put(str(exc))


def test_processes_started_at_once_are_all_refused_while_another_holds_the_lock(tmp_path):
    target = tmp_path / "model"
    holder = start_holder(target)
    try:
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=_try_lock, args=(target, queue)) for _ in range(2)]
        for p in procs:
            p.start()
        answers = [queue.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert all(f"pid {holder.pid}" in a and "model folder" in a for a in answers), answers
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_the_lock_of_a_killed_holder_is_taken_over(tmp_path):
    target = tmp_path / "run1"
    holder = start_holder(target)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    assert lock_file(target).read_text().strip() == str(holder.pid)  # left behind, naming a dead pid
    with holding(target, "training run"):
        assert lock_file(target).read_text().strip() == str(os.getpid())


def test_a_lock_file_naming_a_dead_pid_is_taken_over(tmp_path):
    target = tmp_path / "cache.npy"
    lock_file(target).write_text("999999999\n")  # a holder long gone (no such pid)
    with holding(target, "pool embedding cache"):
        assert lock_file(target).read_text().strip() == str(os.getpid())


def test_a_process_may_take_a_lock_it_holds(tmp_path):
    target = tmp_path / "ws"
    with holding(target, "workspace"):
        with holding(target, "workspace"):
            pass
        assert lock_file(target).is_file()  # still held by the outer block
    assert not lock_file(target).exists()


def test_a_lock_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UdrError, match="cannot lock") as err, holding(tmp_path / "file" / "ws", "workspace"):
        pass
    assert len(str(err.value).splitlines()) == 1
