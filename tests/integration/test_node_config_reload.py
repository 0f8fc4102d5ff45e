"""A node's reload names the jobs that changed, a change of a step's own keys included (a
python step's ``callable``): each step is compared by its own type, not as the base step."""

from __future__ import annotations

from pathlib import Path

from cadenza.clock import FakeClock
from cadenza.home import Home
from cadenza.node import Node
from cadenza.services import Actor
from cadenza.services.config import init_home


def test_a_changed_step_key_of_its_own_type_is_a_changed_job(tmp_path: Path) -> None:
    clock = FakeClock("2027-03-10T09:00:00+00:00")
    made = init_home(tmp_path / "home", example=True, actor=Actor("cli", "init"), clock=clock)
    home = Home(made.path)
    config = home.load_config()
    store = home.open_store(config, clock=clock)
    node = Node(home, config, store, clock=clock, workers=1, scheduler=False, claimer=False)
    try:
        text = home.jobs_file.read_text(encoding="utf-8")
        assert text.count('callable = "demo_tasks:count"') == 1
        home.jobs_file.write_text(text.replace('callable = "demo_tasks:count"',
                                               'callable = "demo_tasks:check_profile"'),
                                  encoding="utf-8")
        assert node.holder.reload() is True
        applied = store.list_events(event_type="CONFIG_CHANGED")[-1]
        assert applied.payload == {"added": [], "removed": [], "changed": ["hello"]}
    finally:
        node.stop(timeout=10)
        store.close()
