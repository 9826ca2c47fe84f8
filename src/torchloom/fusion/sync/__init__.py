"""TimeSync: align streams of different rates to a reference clock, with exact time.

- :mod:`~torchloom.fusion.sync.timesync`: the :class:`TimeSync` dataset;
- :mod:`~torchloom.fusion.sync.clock`: time kinds (float, integer, datetime64) kept exact;
- :mod:`~torchloom.fusion.sync.rule`: the choice rule, vectorised and per tick;
- :mod:`~torchloom.fusion.sync.offline` / :mod:`~torchloom.fusion.sync.online`: arrays at once,
  or iterators read once;
- :mod:`~torchloom.fusion.sync.values`: values as samples hold them;
- :mod:`~torchloom.fusion.sync.report`: :class:`SyncReport` and :class:`TimestampError`.
"""

from __future__ import annotations

from torchloom.errors import TimestampError
from torchloom.fusion.sync.online import reordered
from torchloom.fusion.sync.report import SyncReport
from torchloom.fusion.sync.timesync import TimeSync
from torchloom.fusion.sync.values import plain

__all__ = ["SyncReport", "TimeSync", "TimestampError", "plain", "reordered"]
