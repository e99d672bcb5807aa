"""The interleaved 1F1B order the simulator runs is the one TorchTitan's pipeline runs.

TorchTitan's ``Interleaved1F1B`` is ``torch.distributed.pipelining.ScheduleInterleaved1F1B``: each rank computes
its list of forward and backward actions (``_calculate_single_rank_operations``: warm-up forwards, one forward
and one backward in the steady state, cool-down backwards; ``None`` slots are idle steps of a lock-step picture
the runtime skips). :func:`sim.schedule.rank_orders` must give every rank the same (phase, stage, microbatch)
sequence, for the two TorchTitan plans of the dataset (the seed's PP2 x 2 stages over 64 microbatches, PR
#2107's PP8 x 2 stages over 16) and other shapes. The bubble the model computes then is the bubble of the
schedule TorchTitan runs, not of a look-alike.
"""

from __future__ import annotations

import pytest

from sim.schedule import PipelineSpec, rank_orders

schedules = pytest.importorskip("torch.distributed.pipelining.schedules")


def torch_orders(pp: int, vpp: int, n_micro: int) -> list[list[tuple[str, int, int]]]:
    """Each rank's (phase, stage, microbatch) actions as torch's ScheduleInterleaved1F1B lays them out (its
    per-rank computation, without building stages or process groups)."""
    orders = []
    for rank in range(pp):
        sched = object.__new__(schedules.ScheduleInterleaved1F1B)
        sched.pp_group_size, sched.n_local_stages, sched.rank = pp, vpp, rank
        sched.number_of_rounds = max(1, n_micro // pp)
        sched.microbatches_per_round = n_micro // sched.number_of_rounds
        sched._n_microbatches = n_micro
        actions = sched._calculate_single_rank_operations(rank)
        forward = schedules._ComputationType.FORWARD
        orders.append([("F" if a.computation_type == forward else "B", a.stage_index, a.microbatch_index)
                       for a in actions if a is not None])
    return orders


@pytest.mark.parametrize("pp, vpp, n_micro", [
    (2, 2, 64),   # the seed: TorchTitan TP2 PP2 interleaved, 64 microbatches per rank
    (8, 2, 16),   # TorchTitan PR #2107 on 512 H100: PP8, 2 stages per rank, local batch 16
    (4, 4, 16),
    (4, 2, 8),
    (2, 2, 2),
])
def test_interleaved_1f1b_orders_are_torchs(pp: int, vpp: int, n_micro: int) -> None:
    spec = PipelineSpec("interleaved-1f1b", pp, vpp, n_micro, [1.0] * (pp * vpp), [2.0] * (pp * vpp))
    assert rank_orders(spec) == torch_orders(pp, vpp, n_micro)


def test_a_changed_order_is_caught() -> None:
    """The comparison can fail: swapping two of a rank's actions makes the orders differ."""
    spec = PipelineSpec("interleaved-1f1b", 4, 2, 8, [1.0] * 8, [2.0] * 8)
    mine = rank_orders(spec)
    mine[1][3], mine[1][4] = mine[1][4], mine[1][3]
    assert mine != torch_orders(4, 2, 8)
