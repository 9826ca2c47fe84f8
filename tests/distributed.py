"""A small harness for DDP tests: N gloo ranks on a free loopback port, with a timeout that
names the rank that hung."""

from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import traceback
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank_main(
    function: Callable[..., Any],
    rank: int,
    world_size: int,
    port: int,
    results: Any,
    args: tuple,
    initialise: bool,
) -> None:
    import torch.distributed as dist

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size)
    )
    try:
        if initialise:
            dist.init_process_group("gloo", rank=rank, world_size=world_size)
        results.put((rank, "ok", function(rank, world_size, *args)))
    except BaseException:  # report any failure of this rank to the parent
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(
    function: Callable[..., Any],
    world_size: int = 2,
    *args: Any,
    timeout: float = 120.0,
    initialise: bool = True,
) -> list[Any]:
    """Run ``function(rank, world_size, *args)`` in spawned gloo ranks; return the results by rank.

    With ``initialise=False`` the function calls ``init_process_group`` itself (the environment
    names the master address and port)."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(
            target=_rank_main,
            args=(function, rank, world_size, port, results, args, initialise),
            daemon=False,
        )
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    outcomes: dict[int, Any] = {}
    try:
        while len(outcomes) < world_size:
            try:
                rank, status, value = results.get(timeout=timeout)
            except queue.Empty:
                hung = [rank for rank in range(world_size) if rank not in outcomes]
                raise TimeoutError(f"rank(s) {hung} did not finish within {timeout} s") from None
            if status == "error":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            outcomes[rank] = value
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    return [outcomes[rank] for rank in range(world_size)]
