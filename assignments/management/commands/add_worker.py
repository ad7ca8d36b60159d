from __future__ import annotations

from django.core.management.base import CommandError

from assignments.citus.table_layout import NotCitus
from assignments.citus.worker_nodes import Node, NodeUnusable, StepFailed, worker_add
from core.commands import ServiceCommand


class Command(ServiceCommand):
    help = (
        "On a Citus coordinator with the distributed layout, prepare a new worker node (the service's database "
        "and the citus extension on it) and add it to the cluster; with --rebalance, move shards onto it "
        "(docs/how-to/scale-out-citus.md). Idempotent; prints each step. When the database is not such a "
        "coordinator, or the node cannot be reached or cannot run Citus, it changes nothing and fails."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("host", help="the new node's address, as the coordinator and the other nodes reach it")
        parser.add_argument("--port", type=int, default=5432, help="the new node's port (default 5432)")
        parser.add_argument(
            "--rebalance", action="store_true", help="then move shards onto it, and wait until they have moved"
        )

    def handle(self, *args, host: str, port: int, rebalance: bool, **options) -> None:
        try:
            changed = worker_add(Node(host, port), rebalance=rebalance, say=self.stdout.write)
        except (NotCitus, NodeUnusable) as exc:
            raise CommandError(f"nothing changed: {exc}") from None
        except StepFailed as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write("done" if changed else "the node was already prepared and in the cluster; nothing to do")
