"""One assembly of a store and what it calls in its transactions, for every kind of process.

``cadenza serve`` (the node and its HTTP server), ``cadenza run --local``, the claimer
process, and every CLI command that changes runs (``runs cancel``, ``runs resume``) open a
store the same way (:meth:`~cadenza.home.Home.open_store`, or the claimer's own connection)
and give it the same table of hooks here, once:

=============  ======================================================================
hook           what fills it
=============  ======================================================================
claim          the pools' leaser: a run takes the members its job needs
step lease     the pools' leaser: a step returns and takes its own members
step start     the pools' leaser: the members a run leased go LEASED -> RUNNING
run end        the pools' leaser (release), the notifier (an outbox row for a final
               end), the child runs (a waiting parent wakes; a canceled parent's
               children are canceled)
missed         the notifier (an outbox row for a MISSED fire)
=============  ======================================================================

So a CLI ``runs cancel`` of a parent waiting for its ``call_job`` child cancels the child in
the cancel's own transaction, exactly as the server's cancel does. What the hooks do follows
the configuration (:meth:`Assembly.configure`: the pools' plan, the notifier's rules); which
hooks are wired never changes. Whoever builds an executor applies its configuration's pools
first (:func:`cadenza.resources.pools.apply_pools`: the node at its start and each reload,
``run --local``); an executor's constructor installs nothing.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from cadenza.config.loader import LoadedConfig
from cadenza.notify.rules import Notifier
from cadenza.resources.leasing import PoolLeaser
from cadenza.resources.plan import PoolPlan
from cadenza.store import Store
from cadenza.store.children import ChildRunHook, ChildRuns
from cadenza.store.hooks import StoreHooks


@dataclass(frozen=True)
class Assembly:
    """A store and the parts its hooks call."""

    store: Store
    leaser: PoolLeaser
    notifier: Notifier
    children: ChildRuns

    def configure(self, plan: PoolPlan | None = None,
                  config: Callable[[], LoadedConfig] | None = None) -> None:
        """Follow a configuration: the pools' ``plan`` (a node's start and each reload, a
        ``run --local``), the notifier's source of rules (``config``)."""
        if plan is not None:
            self.leaser.update(plan)
            if plan.members:
                self.store.extends_resource_leases = True
        if config is not None:
            self.notifier.config = config


_LOCK = threading.Lock()
_ASSEMBLED: weakref.WeakKeyDictionary[Store, Assembly] = weakref.WeakKeyDictionary()


def store_hooks(leaser: PoolLeaser, notifier: Notifier, children: ChildRunHook) -> StoreHooks:
    """The one table of hooks (see the module docstring), in the order they run."""
    return StoreHooks(claim=leaser, step_lease=leaser.steps_changed,
                      step_start=(leaser.started,),
                      run_end=(leaser.ended, notifier.run_end_hook, children),
                      missed=(notifier.missed_hook,))


def assemble(store: Store, config: Callable[[], LoadedConfig] | None = None) -> Assembly:
    """``store`` with its hooks (given once; later calls return the same assembly, and a
    ``config`` given then is the one the notifier follows from now on)."""
    with _LOCK:
        found = _ASSEMBLED.get(store)
        if found is None:
            leaser = PoolLeaser(PoolPlan(), postgres=store.dialect == "postgresql",
                                redact=store.redactor.redact_text, emit=store.emit_events)
            notifier = Notifier(store, config)
            children = ChildRunHook(store)
            store.use_hooks(store_hooks(leaser, notifier, children))
            found = Assembly(store, leaser, notifier, children.children)
            _ASSEMBLED[store] = found
        else:
            found.configure(config=config)
    return found
