"""The conformance check: every episode against docs/format.md, for anyone writing the layout."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari.cli import app
from marl_minari.errors import CorruptedDataError, LayoutError, MarlMinariError
from marl_minari.format import layout, offset_index

DATASET = "check/spread-v0"


@pytest.fixture
def spread(record_parallel: Callable[..., Any]) -> Any:
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 5, dataset_id=DATASET, max_cycles=6)
    return dataset


def _main(dataset: Any) -> Path:
    return Path(dataset.data_path) / layout.MAIN_FILE_NAME


def _replace(file: h5py.File, name: str, data: np.ndarray) -> None:
    del file[name]
    file[name] = data


def test_recorded_datasets_pass(spread: Any, record_tictactoe: Callable[..., Any],
                                record_cartpole: Callable[..., Any]) -> None:
    report = mm.check_dataset(DATASET)
    assert (report.kind, report.total_episodes, report.index_checked) == ("marl", 5, True)
    assert report.total_steps == spread.total_steps
    record_tictactoe("check/ttt-v0", 3)
    assert mm.check_dataset("check/ttt-v0").kind == "marl"
    record_cartpole("check/cartpole-v0", 2)
    plain = mm.check_dataset("check/cartpole-v0")
    assert (plain.kind, plain.total_episodes, plain.index_checked) == ("plain", 2, False)
    assert mm.check_dataset(Path(spread.data_path).parent).total_episodes == 5  # by folder


def _t_rows_of_observations(file: h5py.File) -> None:
    name = "episode_2/observations/agent_0"
    _replace(file, name, file[name][:-1])


def _wrong_dtype(file: h5py.File) -> None:
    name = "episode_3/actions/agent_1"
    _replace(file, name, file[name][()].astype(np.int32))


def _wrong_width(file: h5py.File) -> None:
    name = "episode_1/infos/marl/rewards"
    _replace(file, name, file[name][:, :2])


def _wrong_shape(file: h5py.File) -> None:
    name = "episode_4/observations/agent_2"
    _replace(file, name, file[name][:, :3])


def _missing_column(file: h5py.File) -> None:
    del file["episode_1/infos/marl/active"]


def _unknown_agent_infos(file: h5py.File) -> None:
    file["episode_0/infos/marl/agent_infos/intruder/x"] = np.zeros(7)


def _missing_state(file: h5py.File) -> None:
    del file["episode_3/infos/marl/state"]  # the metadata's state_space names one


@pytest.mark.parametrize(("tamper", "where"), [
    (_t_rows_of_observations, "episode_2/observations/agent_0"),
    (_wrong_dtype, "episode_3/actions/agent_1"),
    (_wrong_width, "episode_1/infos/marl/rewards"),
    (_wrong_shape, "episode_4/observations/agent_2"),
    (_missing_column, "episode_1/infos/marl/active"),
    (_unknown_agent_infos, "episode_0/infos/marl/agent_infos/intruder"),
    (_missing_state, "episode_3/infos/marl/state is missing"),
])
def test_layout_violations_name_the_episode_and_path(spread: Any, tamper: Any,
                                                     where: str) -> None:
    with h5py.File(_main(spread), "r+") as file:
        tamper(file)
    with pytest.raises(LayoutError, match=where):
        mm.check_dataset(DATASET)


def _edit_metadata(dataset: Any, **changes: Any) -> None:
    path = Path(dataset.data_path) / layout.METADATA_FILE_NAME
    metadata = json.loads(path.read_text())
    metadata.update(changes)
    path.write_text(json.dumps(metadata))


@pytest.mark.parametrize(("changes", "message"), [
    ({"total_episodes": 2}, "counts 2 episodes"),
    ({"total_episodes": 7}, "counts 7 episodes"),
    ({"total_steps": 3}, "total_steps"),
    ({"total_steps": "many"}, "total_steps must be"),
    ({"observation_space": {"type": "Nonsense"}}, "observation_space"),
])
def test_metadata_that_disagrees_with_the_file_is_corrupt(spread: Any, changes: dict,
                                                          message: str) -> None:
    _edit_metadata(spread, **changes)
    with pytest.raises(CorruptedDataError, match=message):
        mm.check_dataset(DATASET)


def test_a_wrong_middle_index_entry_is_found_even_when_sealed(spread: Any) -> None:
    # As a writer that follows the spec's words but computes one offset wrong would do.
    index = offset_index.read(Path(spread.data_path))
    assert index is not None
    offsets = {p: o.tolist() for p, o in index.offsets.items()}
    offsets["rewards"][1] += 8
    path = _main(spread)
    with h5py.File(path, "r+") as file:
        offset_index.seal(file, offsets, index.steps.tolist())
    offset_index.write(path, offsets, index.steps.tolist())
    with pytest.raises(CorruptedDataError, match="episode_1/rewards: index says offset"):
        mm.check_dataset(DATASET)


def test_publish_refuses_what_the_check_refuses(spread: Any, tmp_path: Path) -> None:
    from marl_minari import registry

    with h5py.File(_main(spread), "r+") as file:
        _t_rows_of_observations(file)
    with pytest.raises(LayoutError, match="episode_2/observations/agent_0"):
        registry.publish(DATASET, str(tmp_path / "registry"))
    assert not (tmp_path / "registry" / "check").exists()


def test_cli_check(spread: Any) -> None:
    result = CliRunner().invoke(app, ["check", DATASET])
    assert result.exit_code == 0, result.output
    assert "ok: 5 episodes" in result.output and "offset index verified" in result.output
    with h5py.File(_main(spread), "r+") as file:
        _wrong_dtype(file)
    result = CliRunner().invoke(app, ["check", DATASET])
    assert result.exit_code != 0
    assert isinstance(result.exception, MarlMinariError) or "episode_3" in result.output


def _permute_agents(dataset: Any, *, both_copies: bool) -> None:
    path = Path(dataset.data_path) / layout.METADATA_FILE_NAME
    metadata = json.loads(path.read_text())
    agents = metadata["marl_minari"]["possible_agents"]
    metadata["marl_minari"]["possible_agents"] = agents[::-1]
    if both_copies:
        env_spec = json.loads(metadata["env_spec"])
        env_spec["kwargs"]["possible_agents"] = agents[::-1]
        metadata["env_spec"] = json.dumps(env_spec)
    path.write_text(json.dumps(metadata))


@pytest.mark.parametrize(("both_copies", "older_file", "where"), [
    (False, False, "main_data.hdf5"), (True, False, "main_data.hdf5"),
    (False, True, "env_spec")])
def test_permuted_possible_agents_are_refused_at_load(spread: Any, both_copies: bool,
                                                      older_file: bool, where: str) -> None:
    if older_file:  # written before the file recorded the agent order
        with h5py.File(_main(spread), "r+") as file:
            del file.attrs[layout.AGENTS_ATTRIBUTE]
    _permute_agents(spread, both_copies=both_copies)
    with pytest.raises(CorruptedDataError, match=f"recorded in {where}"):
        mm.load_dataset(DATASET)


@pytest.mark.parametrize("total", [2, 7])
def test_episode_count_is_cross_checked_at_every_load(spread: Any, total: int) -> None:
    _edit_metadata(spread, total_episodes=total)
    with pytest.raises(CorruptedDataError, match=f"counts {total} episodes"):
        mm.load_dataset(DATASET)
    with pytest.raises(CorruptedDataError, match=f"counts {total} episodes"):
        mm.describe(DATASET)


@pytest.mark.parametrize(("jpeg_encoding", "state_encoding", "encoded"), [
    (True, None, {"observations/piston_0", layout.STATE_PATH}),  # the recorder's defaults
    (False, "jpeg", {layout.STATE_PATH}),
    (True, "raw", {"observations/piston_0"}),
])
def test_jpeg_leaves_pass_wherever_the_layout_puts_them(
        jpeg_encoding: bool, state_encoding: str | None, encoded: set[str],
        tmp_path: Path) -> None:
    from marl_minari.collectors.collect import collect

    from marl_minari import registry

    dataset = collect("butterfly/pistonball_v6", 1, dataset_id="check/pistonball-v0",
                      env_kwargs={"n_pistons": 3, "max_cycles": 2},
                      jpeg_encoding=jpeg_encoding, state_encoding=state_encoding,
                      author="tests", author_email="tests@example.com",
                      code_permalink="https://example.com/tests")
    with h5py.File(_main(dataset)) as file:
        stored_as_bytes = {path for path in ("observations/piston_0", layout.STATE_PATH)
                           if file[f"episode_0/{path}"].ndim == 2}
    assert stored_as_bytes == encoded
    assert mm.check_dataset("check/pistonball-v0").total_episodes == 1
    registry.publish("check/pistonball-v0", (tmp_path / "registry").as_uri())

    metadata_path = Path(dataset.data_path) / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    metadata["jpeg_encoding"] = not jpeg_encoding
    metadata["marl_minari"]["state_encoding"] = (
        "raw" if layout.STATE_PATH in encoded else "jpeg")
    metadata_path.write_text(json.dumps(metadata))
    with pytest.raises(LayoutError, match="episode_0/(observations/piston_0|infos/marl/state)"):
        mm.check_dataset("check/pistonball-v0")


def _copy_episode(source: Any, target: Any) -> None:
    """Put ``source``'s first episode at the end of ``target``, metadata counts updated (as
    an append that asked no rule once did)."""
    with h5py.File(_main(source), "r") as src, h5py.File(_main(target), "r+") as dst:
        count = len(dst)
        src.copy(src["episode_0"], dst, name=f"episode_{count}")
        dst[f"episode_{count}"].attrs["id"] = count
        steps = int(src["episode_0"].attrs["total_steps"])
    _edit_metadata(target, total_episodes=count + 1, total_steps=target.total_steps + steps)


@pytest.mark.parametrize("stored_api", ["parallel", "aec"])
def test_a_dataset_that_mixes_apis_is_reported(record_parallel: Callable[..., Any],
                                               stored_api: str) -> None:
    """A turn-based episode among simultaneous ones (or the reverse) fails the check, which
    names the episode, both APIs and what to do."""
    apis = {"parallel": "check/simultaneous-v0", "aec": "check/turns-v0"}
    datasets = {}
    for api, dataset_id in apis.items():
        collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3)
                                             ) if api == "parallel" else mm.AECDataCollector(
            mm.make_env("mpe2/simple_spread_v3", api="aec", max_cycles=3))
        collector.reset(seed=0)
        if api == "parallel":
            while collector.agents:
                collector.step({a: 0 for a in collector.agents})
        else:
            for _ in collector.agent_iter():
                _, _, terminated, truncated, _ = collector.last()
                collector.step(None if terminated or truncated else 0)
        datasets[api] = collector.create_dataset(dataset_id, algorithm_name="zeros",
                                                 author="tests", author_email="t@example.com",
                                                 code_permalink="https://example.com",
                                                 description="tests")
        collector.close()
        assert mm.check_dataset(dataset_id).total_episodes == 1
    other = "aec" if stored_api == "parallel" else "parallel"
    _copy_episode(datasets[other], datasets[stored_api])
    with pytest.raises(LayoutError, match=(
            rf"episode_1 was recorded through the '{other}' API .* the dataset's api is "
            rf"'{stored_api}': the dataset mixes turn-based and simultaneous episodes")):
        mm.check_dataset(apis[stored_api])


def test_a_state_without_a_state_space_is_refused(spread: Any) -> None:
    metadata_path = Path(spread.data_path) / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    metadata["marl_minari"]["state_space"] = None
    metadata_path.write_text(json.dumps(metadata))
    with pytest.raises(LayoutError, match="episode_0/infos/marl/state is present but the "
                                          "metadata's state_space is null"):
        mm.check_dataset(DATASET)


def test_a_damaged_jpeg_row_is_named_by_episode_leaf_and_row() -> None:
    from marl_minari.collectors.collect import collect

    dataset = collect("butterfly/pistonball_v6", 1, dataset_id="check/jpeg-row-v0",
                      env_kwargs={"n_pistons": 3, "max_cycles": 4}, author="tests",
                      author_email="tests@example.com", code_permalink="https://example.com")
    with h5py.File(_main(dataset), "r+") as file:
        leaf = file["episode_0/observations/piston_0"]
        rows = leaf[()]
        rows[1, :] = np.arange(rows.shape[1]) % 251  # no JPEG header
        leaf[...] = rows
    with pytest.raises(CorruptedDataError, match=r"episode_0/observations/piston_0, row 1: not "
                                                 r"a JPEG image .*UnidentifiedImageError"):
        mm.load_dataset("check/jpeg-row-v0")[0]


@pytest.mark.parametrize(("seed", "shown"), [("a seed", "'a seed'"), (1.5, "1.5"),
                                             (np.array([1, 2]), r"\[1, 2\]")])
def test_a_seed_that_is_not_one_integer_is_named(spread: Any, seed: Any, shown: str) -> None:
    """It escaped as a bare ValueError, or was read as 1."""
    with h5py.File(_main(spread), "r+") as file:
        file["episode_1"].attrs["seed"] = seed
    message = rf"episode_1: attribute seed is {shown} .*not one integer"
    for read in (lambda: mm.check_dataset(DATASET), lambda: mm.load_dataset(DATASET)[1],
                 lambda: mm.load_dataset(DATASET).episode_attributes([1])):
        with pytest.raises(CorruptedDataError, match=message):
            read()
    assert mm.load_dataset(DATASET)[0].id == 0  # the other episodes stay readable


def _ended_at_every_step(file: h5py.File) -> None:
    file["episode_2/terminations"][...] = True


def _ended_neither_way(file: h5py.File) -> None:
    for flag in ("terminations", "truncations"):
        file[f"episode_2/{flag}"][...] = False


def _team_reward_off(file: h5py.File) -> None:
    file["episode_1/rewards"][0] += 1.0


@pytest.mark.parametrize(("tamper", "message"), [
    (_ended_at_every_step, "episode_2: terminations or truncations is true at step 0, before "
                           "the last"),
    (_ended_neither_way, "episode_2: at the last step neither of terminations and truncations"),
    (_team_reward_off, r"episode_1: rewards\[0\] is .*, but the agents' rewards of that step "
                       r"\(infos/marl/rewards row 1\) sum to"),
], ids=["flags-early", "flags-none", "team-reward"])
def test_values_the_layout_rules_out_are_named(spread: Any, tamper: Any, message: str) -> None:
    """Shapes and dtypes passed, and check said the dataset followed the layout."""
    with h5py.File(_main(spread), "r+") as file:
        tamper(file)
    with pytest.raises(LayoutError, match=message):
        mm.check_dataset(DATASET)


def test_a_turn_that_names_no_agent_is_named(record_tictactoe: Callable[..., Any]) -> None:
    dataset = record_tictactoe("check/ttt-turns-v0", 2)
    with h5py.File(_main(dataset), "r+") as file:
        file["episode_1/infos/marl/extras/agent_selection"][2] = 99
    with pytest.raises(LayoutError, match="episode_1/infos/marl/extras/agent_selection, row 2: "
                                          "99 is no index into the 2 possible_agents"):
        mm.check_dataset("check/ttt-turns-v0")
