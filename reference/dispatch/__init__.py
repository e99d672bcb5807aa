"""Token dispatch/combine backends behind one interface (:class:`~reference.dispatch.base.Dispatcher`).

- :mod:`~reference.dispatch.local`: one process, no communication (EP=1, the oracle);
- :mod:`~reference.dispatch.all_to_all`: ``torch.distributed.all_to_all_single`` (gloo or NCCL);
- :mod:`~reference.dispatch.deepep`: DeepEP ``Buffer`` (v1) or ``ElasticBuffer`` (v2), imported lazily;
  :mod:`~reference.dispatch.fake_deepep` mimics their signatures over torch.distributed for CPU tests.
"""

from __future__ import annotations

from reference.dispatch.base import Dispatched, Dispatcher, check_ep

__all__ = ["Dispatched", "Dispatcher", "check_ep", "DISPATCH_BACKENDS"]

DISPATCH_BACKENDS = ("local", "all_to_all", "deepep")
