"""The team library: names, saves, renames, deletes; under races and oddities, one winner per race, no lost update, odd entries
left alone."""

import json
import multiprocessing
import os
import socket
import time

import pytest

from explorer.sharing import library
from explorer.errors import ExplorerError
from explorer.layout import SEED_LAYOUT, parse_layout
from tests.paths import APP

PROCESSES = 4
ROUNDS = 45  # 15 races of each operation


@pytest.fixture
def shelf(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "library"))
    return tmp_path / "library"


def seed(name="seed"):
    return parse_layout({**SEED_LAYOUT, "name": name})


# --- saving, renaming, deleting ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/b", "..", ".hidden", "", "x" * 65, "a\\b", "trailing "])
def test_names_that_try_to_escape_the_library_are_refused(shelf, seed_dict, name):
    with pytest.raises(ExplorerError, match="library name"):
        library.save(name, parse_layout(seed_dict))
    assert not list(shelf.parent.glob("**/*.json"))


def test_two_saves_under_one_name_never_overwrite(shelf, seed_dict):
    first = library.save("team plan", parse_layout(seed_dict))
    seed_dict["rules"] = [["batch", "data"]]
    with pytest.raises(ExplorerError, match="already exists"):
        library.save("team plan", parse_layout(seed_dict))
    assert library.load("team plan").layout.rules_for_flax() == (("batch", "data"), ("hidden", "model"))
    replaced = library.save("team plan", parse_layout(seed_dict), replaces=first.version)
    with pytest.raises(ExplorerError, match="changed by someone else"):
        library.save("team plan", parse_layout({**seed_dict, "name": "stale"}), replaces=first.version)
    assert library.load("team plan").version == replaced.version
    assert sorted(p.name for p in shelf.iterdir()) == [".lock", "team plan.json"]  # no temporary files left behind


def test_rename_and_delete(shelf, seed_dict):
    library.save("a", parse_layout(seed_dict))
    library.save("b", parse_layout(seed_dict))
    with pytest.raises(ExplorerError, match="already exists"):
        library.rename("a", "b")
    library.rename("a", "c")
    assert library.names() == ["b", "c"]
    library.delete("b")
    assert library.names() == ["c"]
    with pytest.raises(ExplorerError, match="not in the library"):
        library.delete("b")


def test_saved_file_is_the_layout_file_format(shelf, seed_dict):
    library.save("seed", parse_layout(seed_dict))
    assert json.loads((shelf / "seed.json").read_text()) == parse_layout(seed_dict).to_dict()


# --- races between processes ---------------------------------------------------------------------


def _racer(folder: str, worker: int, barrier, plan: list, results) -> None:
    """Run each planned operation at the same moment as the other workers; report what happened."""
    os.environ["EXPLORER_LIBRARY"] = folder
    from explorer.sharing import library
    from explorer.errors import ExplorerError
    from explorer.layout import SEED_LAYOUT, parse_layout

    for round_index, (operation, name, version) in enumerate(plan):
        layout = parse_layout({**SEED_LAYOUT, "name": f"worker {worker}"})
        barrier.wait()
        try:
            if operation == "replace":
                outcome = ("won", library.save(name, layout, replaces=version).version)
            elif operation == "rename":
                library.rename(name, f"{name} by {worker}")
                outcome = ("won", None)
            else:
                library.delete(name)
                outcome = ("won", None)
        except ExplorerError as error:
            outcome = ("refused", str(error))
        except Exception as error:  # anything else is a failure the test reports
            outcome = ("crashed", f"{type(error).__name__}: {error}")
        results.put((round_index, worker, outcome))


def test_replace_rename_and_delete_races_have_exactly_one_winner(shelf):
    plan = []
    for round_index in range(ROUNDS):
        operation = ("replace", "rename", "delete")[round_index % 3]
        name = f"{operation} {round_index}"
        plan.append((operation, name, library.save(name, seed()).version))
    context = multiprocessing.get_context("spawn")  # no fork of a process running JAX's threads
    barrier, results = context.Barrier(PROCESSES), context.Queue()
    workers = [context.Process(target=_racer, args=(str(shelf), w, barrier, plan, results)) for w in range(PROCESSES)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=300) for _ in range(PROCESSES * ROUNDS)]
    for worker in workers:
        worker.join(timeout=60)
    by_round: dict[int, dict[int, tuple]] = {}
    for round_index, worker, outcome in outcomes:
        by_round.setdefault(round_index, {})[worker] = outcome
    files = sorted(p.name for p in shelf.iterdir())
    for round_index, (operation, name, _) in enumerate(plan):
        round_outcomes = by_round[round_index]
        assert not [o for o in round_outcomes.values() if o[0] == "crashed"], round_outcomes
        winners = [w for w, o in round_outcomes.items() if o[0] == "won"]
        assert len(winners) == 1, f"{operation} round {round_index}: winners {winners}"
        copies = [f for f in files if f == f"{name}.json" or f.startswith(f"{name} by ")]
        if operation == "replace":  # the winner's layout is the one stored: no lost update
            stored = library.load(name)
            assert stored.layout.name == f"worker {winners[0]}"
            assert stored.version == round_outcomes[winners[0]][1]
            assert copies == [f"{name}.json"]
        elif operation == "rename":
            assert copies == [f"{name} by {winners[0]}.json"]
        else:
            assert copies == []
    assert not [f for f in files if f.startswith(".saving-")]


# --- oddities in the folder ----------------------------------------------------------------------


def test_a_symlink_entry_is_skipped_and_never_acted_on(shelf, tmp_path):
    library.save("real", seed())
    outside = tmp_path / "outside.json"
    outside.write_text(seed("outside").to_json())
    os.symlink(outside, shelf / "link.json")
    os.symlink(shelf / "real.json", shelf / "inner.json")
    listed = library.listing()
    assert listed.names == ("real",)
    assert {name for name, _ in listed.skipped} == {"'link.json'", "'inner.json'"}
    for action in (
        lambda: library.load("link"),
        lambda: library.delete("inner"),
        lambda: library.rename("link", "moved"),
        lambda: library.save("inner", seed(), replaces="x"),
    ):
        with pytest.raises(ExplorerError):
            action()
    assert outside.exists() and (shelf / "real.json").exists() and (shelf / "inner.json").is_symlink()
    assert not (shelf / "moved.json").exists()


def test_a_folder_a_fifo_and_a_socket_named_json_are_skipped_and_never_block(shelf):
    library.save("real", seed())
    (shelf / "folder.json").mkdir()
    os.mkfifo(shelf / "pipe.json")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(shelf / "sock.json"))
        listed = library.listing()
        assert listed.names == ("real",)
        assert {name for name, _ in listed.skipped} == {"'folder.json'", "'pipe.json'", "'sock.json'"}
        started = time.monotonic()
        for name in ("folder", "pipe", "sock"):
            with pytest.raises(ExplorerError, match="not a regular file|cannot be read"):
                library.load(name)
            with pytest.raises(ExplorerError, match="not a regular file"):
                library.delete(name)
        assert time.monotonic() - started < 60  # generous: a FIFO opened for reading would block forever


def test_entries_that_are_not_utf8_or_nested_deep_are_reported_not_raised(shelf):
    (shelf).mkdir(parents=True, exist_ok=True)
    (shelf / "latin.json").write_bytes(json.dumps({**SEED_LAYOUT, "name": "caf\u00e9"}, ensure_ascii=False).encode("latin-1"))
    (shelf / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (shelf / b"\xff\xfe.json".decode("utf-8", "surrogateescape")).write_text("{}")
    listed = library.listing()
    assert listed.names == ("deep", "latin")
    assert [reason for _, reason in listed.skipped] == ["its name is not a library name"]
    with pytest.raises(ExplorerError, match="not UTF-8"):
        library.load("latin")
    with pytest.raises(ExplorerError, match="nested deeper"):
        library.load("deep")


def test_temporaries_left_by_a_writer_that_died_are_cleaned(shelf):
    library.save("a", seed())
    (shelf / ".saving-abandoned.tmp").write_text("half a layo")
    library.save("b", seed())
    assert sorted(p.name for p in shelf.iterdir() if p.name != ".lock") == ["a.json", "b.json"]


@pytest.mark.parametrize(
    "make_bad",
    [
        lambda tmp: tmp / "a-file",
        lambda tmp: tmp / "a-file" / "below",
        lambda tmp: "/proc/no/such/place",
    ],
)
def test_a_bad_library_folder_is_one_message(tmp_path, monkeypatch, make_bad):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("EXPLORER_LIBRARY", str(make_bad(tmp_path)))
    with pytest.raises(ExplorerError, match="EXPLORER_LIBRARY"):
        library.listing()


@pytest.mark.parametrize("page", ["views/0_Layout.py", "views/2_Compare.py"])
def test_a_bad_library_folder_is_a_message_in_the_library_section_only(tmp_path, monkeypatch, page):
    from streamlit.testing.v1 import AppTest

    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("EXPLORER_LIBRARY", str(tmp_path / "a-file"))
    at = AppTest.from_file(APP, default_timeout=300)
    at.switch_page(page)
    at.run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == (2 if page.endswith("Compare.py") else 1), errors
    assert all("EXPLORER\\_LIBRARY" in e and "cannot be used" in e for e in errors)
    assert [e.value for e in at.sidebar.error] == errors[-1:]  # the sidebar's library section
    assert at.session_state["layout_name"] == "seed-2x4"  # the rest of the page works


def test_skipped_entries_are_reported_under_the_library(shelf):
    from streamlit.testing.v1 import AppTest

    library.save("real", seed())
    (shelf / "folder.json").mkdir()
    at = AppTest.from_file(APP, default_timeout=300)
    at.run()
    assert not at.exception
    assert any("folder.json" in w.value and "it is a folder" in w.value for w in at.sidebar.warning)
    assert at.selectbox(key="library_choice").options == ["real"]
