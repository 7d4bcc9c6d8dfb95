"""The split of a pair's user-level interval (analysis/pairs.py: a program's event on one
host to another's on the other) into the network's time and each end's, from the packets the
captures matched (analysis/packets.py): the KU report's Figure 4.1.1 against 4.1.2.

Each instance of a pair between two hosts is given the first packet its start's host sent to
its end's host at or after its start that was received there by its end: the sender's part is
from the start to that packet leaving (its stack, its wait, an emulated link's queue not
included: a held packet's send is when it met the link), the network's the packet's kernel to
kernel delay, the receiver's from its arrival to the end (wake-up, reassembly, the read). An
instance with no such packet (a pair on one host, a packet not captured) is not split, and
counted apart. Per pair and phase: the medians of each part, which need not add up to the
interval's median.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from .units import duration_text

SPLIT_SQL = """
WITH instances AS (
    SELECT i.name, i.start_host, i.end_host, i.start_ts, i.end_ts, i.global_ns, p.phase
    FROM intervals i ASOF LEFT JOIN (SELECT DISTINCT ON (step) step, phase, entered FROM phases
                                     WHERE entered IS NOT NULL ORDER BY step, entered) p
      ON i.start_ts >= p.entered
    WHERE i.source = 'pair' AND i.start_host <> i.end_host
), carried AS (
    SELECT n.*, k.sent_ts, k.received_ts, k.one_way_ns
    FROM instances n ASOF LEFT JOIN (SELECT * FROM packets WHERE matched) k
      ON n.start_host = k.src_host AND n.end_host = k.dst_host AND k.sent_ts >= n.start_ts
)
SELECT name, start_host, end_host, coalesce(phase, ''), count(*),
       count(*) FILTER (WHERE received_ts <= end_ts),
       median(global_ns), median(sent_ts - start_ts) FILTER (WHERE received_ts <= end_ts),
       median(one_way_ns) FILTER (WHERE received_ts <= end_ts),
       median(end_ts - received_ts) FILTER (WHERE received_ts <= end_ts)
FROM carried GROUP BY ALL ORDER BY name, min(start_ts)
"""


@dataclass(frozen=True)
class Split:
    """One pair's instances in one phase, split: how many, how many a packet carried, and
    the medians of the interval and of its parts (ns)."""

    pair: str
    src: str
    dst: str
    phase: str
    instances: int
    carried: int
    user_ns: float | None
    sender_ns: float | None
    network_ns: float | None
    receiver_ns: float | None

    def text(self) -> str:
        head = f"{self.pair} {self.src} -> {self.dst} {self.phase or 'outside the steps'}"
        if not self.carried:
            return f"{head}: {self.instances} instance(s), none carried by a captured packet"
        return (f"{head}: user {duration_text(self.user_ns)} = sender {duration_text(self.sender_ns)} "
                f"+ network {duration_text(self.network_ns)} + receiver {duration_text(self.receiver_ns)} "
                f"(medians; {self.carried} of {self.instances} carried by a captured packet)")


def splits(db: duckdb.DuckDBPyConnection) -> list[Split]:
    """Each pair's split per phase; none without both an intervals and a packets table."""
    names = {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not {"intervals", "packets", "phases"} <= names:
        return []
    return [Split(*row) for row in db.execute(SPLIT_SQL).fetchall()]


def split_lines(db: duckdb.DuckDBPyConnection) -> list[str]:
    """`report`'s block: each pair's interval against its packets' network time."""
    said = splits(db)
    if not said:
        return []
    return ["user-level against IP-level (each pair's interval split by its packets):",
            *(f"  {s.text()}" for s in said)]
