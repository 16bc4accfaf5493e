"""Durable plans of multi-step procedures: `reverse`, `failover`, `recover`.

A reversal changes both clusters in several steps (reserve, wait, detach,
attach swapped, promote the remote). A crash of either side between two of
them used to leave a state no command finished: a namespace reserved on
both sides and attached nowhere, or attached with the remote leading but
still reserved there, so that no cluster accepted a write. So the cluster
that starts a reversal journals its plan before the first change (which
namespaces, which link, which remote) and each step's outcome before the
next step begins. After a restart the plan is replayed with the rest of the
journal; running `reverse` again on that cluster continues the same plan
from its first step not done, instead of planning anew from what is left
(which would find fewer namespaces, or none). A plan ends (its record is
cleared) when the last step is done, or when a step before any mapping
changed fails and the reservations the plan made are rolled back.

`failover` and a confirmed `recover` journal a plan the same way: one
plan per link, whichever procedure holds it; another procedure on that
link is refused until it ends. Their plans keep what the answer must say
whatever happens later (`detail`): the failover's abandoned partitions and
the recovery's cut, so that a re-run after a crash reports what the first
run did (records it gave up or cut), not only what is left to do.

`describe-link` and `ccr-admin procedures` show a plan in progress. Pure
data: the journal record is `journal.ProcedurePlan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from linkd.core import journal as jr

REVERSE = "reverse"
FAILOVER = "failover"
RECOVER = "recover"


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step's outcome, as journalled before the next step began."""

    name: str
    ok: bool
    result: str
    duration_ms: int

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "ok": self.ok, "result": self.result,
                "duration_ms": self.duration_ms}

    @staticmethod
    def from_json(obj: dict[str, object]) -> PlanStep:
        return PlanStep(str(obj["name"]), bool(obj["ok"]), str(obj["result"]),
                        jr.json_int(obj["duration_ms"]))


@dataclass(frozen=True, slots=True)
class PlanNamespace:
    """A namespace the plan moves: its type ("topic" | "group") and its
    prefixes here and on the remote."""

    resource_type: str
    local_prefix: str
    remote_prefix: str
    # Reserved here before the plan began (a roll-back leaves it so).
    reserved_before: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    """A procedure in progress on one link of this cluster."""

    procedure: str  # REVERSE | FAILOVER | RECOVER
    link: str
    link_id: str
    remote_cluster_id: str
    namespaces: tuple[PlanNamespace, ...]
    timeout_ms: int
    started_ms: int
    steps: tuple[PlanStep, ...] = ()  # outcomes so far, oldest first
    restarts: int = 0  # how many times a re-run took it up again
    # What the procedure's answer must keep reporting (plain JSON): a
    # failover's abandoned partitions, a recovery's cut. None: nothing.
    detail: dict[str, object] | None = None

    @property
    def begun(self) -> str:
        """When the plan began, as an operator reads it (UTC)."""
        return utc_text(self.started_ms)

    def done(self, step: str) -> bool:
        return any(s.name == step and s.ok for s in self.steps)

    def next_step(self, order: tuple[str, ...]) -> str | None:
        return next((s for s in order if not self.done(s)), None)

    def with_step(self, step: PlanStep) -> Plan:
        # A retried step replaces its failed outcome.
        kept = tuple(s for s in self.steps if s.name != step.name)
        return replace(self, steps=(*kept, step))

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "procedure": self.procedure,
            "link": self.link,
            "link_id": self.link_id,
            "remote_cluster_id": self.remote_cluster_id,
            "namespaces": [
                [n.resource_type, n.local_prefix, n.remote_prefix, n.reserved_before]
                for n in self.namespaces
            ],
            "timeout_ms": self.timeout_ms,
            "started_ms": self.started_ms,
            "steps": [s.to_json() for s in self.steps],
            "restarts": self.restarts,
        }
        if self.detail is not None:
            out["detail"] = self.detail
        return out

    @staticmethod
    def from_json(obj: dict[str, object]) -> Plan:
        detail = obj.get("detail")
        return Plan(
            str(obj["procedure"]),
            str(obj["link"]),
            str(obj["link_id"]),
            str(obj["remote_cluster_id"]),
            tuple(
                PlanNamespace(str(t), str(lp), str(rp), bool(before))
                for t, lp, rp, before in map(jr.json_list, jr.json_list(obj["namespaces"]))
            ),
            jr.json_int(obj["timeout_ms"]),
            jr.json_int(obj["started_ms"]),
            tuple(
                PlanStep.from_json(jr.json_object(s)) for s in jr.json_list(obj.get("steps", []))
            ),
            jr.json_int(obj.get("restarts", 0)),
            None if detail is None else jr.json_object(detail),
        )


def utc_text(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 in UTC, to the millisecond
    (the proleptic Gregorian calendar; the core reads no clock and keeps no
    time zones, so the date is computed here: days to civil date, as in
    Howard Hinnant's `civil_from_days`)."""
    days, rest = divmod(ms, 86_400_000)
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1_000)
    return (
        f"{year:04d}-{month:02d}-{day:02d}T{hours:02d}:{minutes:02d}:{seconds:02d}"
        f".{millis:03d}Z"
    )


@dataclass
class PlanTable:
    """The plans in progress on this cluster, one per link at most."""

    plans: dict[str, Plan] = field(default_factory=dict)

    def get(self, link: str) -> Plan | None:
        return self.plans.get(link)

    def put(self, plan: Plan) -> list[jr.JournalRecord]:
        """Stores (in memory) and returns the record to journal."""
        record = jr.ProcedurePlan(plan.link, plan.to_json())
        self.apply_record(record)
        return [record]

    def end(self, link: str) -> list[jr.JournalRecord]:
        if link not in self.plans:
            return []
        record = jr.ProcedurePlan(link, None)
        self.apply_record(record)
        return [record]

    def apply_record(self, record: jr.ProcedurePlan) -> None:
        if record.plan is None:
            self.plans.pop(record.link, None)
        else:
            self.plans[record.link] = Plan.from_json(record.plan)

    def snapshot(self) -> dict[str, object]:
        return {name: plan.to_json() for name, plan in sorted(self.plans.items())}

    def restore(self, snapshot: dict[str, object]) -> None:
        self.plans = {str(k): Plan.from_json(jr.json_object(v)) for k, v in snapshot.items()}


__all__ = ["FAILOVER", "RECOVER", "REVERSE", "Plan", "PlanNamespace", "PlanStep", "PlanTable"]
