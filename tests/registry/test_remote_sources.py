"""Remote datasets named by URL next to local ones: one buffer, one combined dataset.

A local recording, one dataset on an http:// registry (a real server process on loopback)
and one on an s3:// registry (moto's server), each published with our publish and named as
``<registry URL>/<dataset id>``.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import jax
import numpy as np
import pytest
from marl_minari.adapters import make_buffer

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    RemoteError,
)
from marl_minari.format.ids import dataset_dir
from marl_minari.sources.remote import candidate_splits, origin_path, split_remote_source

LOCAL, ON_HTTP, ON_S3 = "mpe2/spread/local-v0", "mpe2/spread/http-v0", "mpe2/spread/s3-v0"


def _publish_and_forget(dataset_id: str, remote: str | None = None) -> None:
    registry.publish(dataset_id, remote)
    shutil.rmtree(dataset_dir(dataset_id))


@pytest.fixture
def three_sources(registry_dir: Path, small_dataset: Callable[..., str],
                  http_server: Callable[[Path], str], s3_remote: str) -> list[str]:
    """A local id, an http:// URL and an s3:// URL, each of a 2-episode mpe2 recording."""
    small_dataset(LOCAL)
    small_dataset(ON_HTTP, episodes=3)
    _publish_and_forget(ON_HTTP)  # to registry_dir, then served over http
    small_dataset(ON_S3, episodes=4)
    _publish_and_forget(ON_S3, s3_remote)
    return [LOCAL, f"{http_server(registry_dir)}/{ON_HTTP}", f"{s3_remote}/{ON_S3}"]


def test_one_buffer_from_local_http_and_s3(three_sources: list[str]) -> None:
    buffer, state = make_buffer(three_sources, sample_batch_size=512,
                                sample_sequence_length=3, weights=[0.0, 1.0, 3.0])
    sample = jax.jit(buffer.sample)(state, jax.random.PRNGKey(0)).experience
    assert sample["observations"].shape[:3] == (512, 3, 3)
    assert sample["actions"].shape == (512, 3, 3)
    drawn = np.bincount(np.asarray(sample["source"][:, 0]), minlength=3)
    assert drawn[0] == 0  # weight 0: never drawn
    assert 0.15 < drawn[1] / 512 < 0.35 and 0.65 < drawn[2] / 512 < 0.85
    # Downloaded once, through the verified download, into the datasets root.
    assert mm.load_dataset(ON_HTTP).total_episodes == 3
    assert mm.load_dataset(ON_S3).total_episodes == 4
    assert origin_path(ON_HTTP).is_file() and origin_path(ON_S3).is_file()


def test_second_use_reads_the_local_copy(three_sources: list[str],
                                         registry_dir: Path) -> None:
    _, http_url, _ = three_sources
    first = mm.combine_datasets([LOCAL, http_url], "mpe2/spread/both-v0")
    assert first.total_episodes == 5
    shutil.rmtree(registry_dir)  # the server now answers 404 for everything
    with pytest.raises(DatasetNotFoundError):
        split_remote_source(http_url)
    # ... but a dataset already fetched from it is read locally, without asking it.
    assert mm.combine_datasets([http_url], "mpe2/spread/again-v0").total_episodes == 3


def test_local_dataset_of_the_same_id_is_not_taken_for_the_remote_one(
        three_sources: list[str], small_dataset: Callable[..., str]) -> None:
    _, http_url, _ = three_sources
    small_dataset(ON_HTTP, episodes=1)  # our own recording, under the published id
    with pytest.raises(DatasetExistsError, match="holds other files than the published"):
        make_buffer([http_url], sample_batch_size=2, sample_sequence_length=1)
    shutil.rmtree(dataset_dir(ON_HTTP))
    make_buffer([http_url], sample_batch_size=2, sample_sequence_length=1)  # downloads
    assert mm.load_dataset(ON_HTTP).total_episodes == 3
    metadata = dataset_dir(ON_HTTP) / "data" / "metadata.json"
    metadata.write_text(metadata.read_text().replace('"total_episodes": 3',
                                                     '"total_episodes": 3 '))
    with pytest.raises(DatasetExistsError, match="holds other files than the published"):
        make_buffer([http_url], sample_batch_size=2, sample_sequence_length=1)


def test_the_copy_a_dataset_was_published_from_is_the_published_one(
        registry_dir: Path, small_dataset: Callable[..., str]) -> None:
    dataset_id = small_dataset("mpe2/spread/mine-v0")
    registry.publish(dataset_id)
    url = f"file://{registry_dir}/{dataset_id}"
    assert not origin_path(dataset_id).exists()
    buffer, state = make_buffer([url], sample_batch_size=2, sample_sequence_length=1)
    assert origin_path(dataset_id).is_file()  # same files: recorded, used, not downloaded
    assert int(state.experience["source"].shape[1]) == mm.load_dataset(dataset_id).total_steps


def test_url_splits(registry_dir: Path, published: str) -> None:
    url = f"file://{registry_dir}/{published}"
    assert split_remote_source(url) == (f"file://{registry_dir}", published)
    assert candidate_splits("http://host/reg/mpe2/spread/random-v0") == [
        ("http://host/reg/mpe2/spread", "random-v0"), ("http://host/reg/mpe2", "spread/random-v0"),
        ("http://host/reg", "mpe2/spread/random-v0"), ("http://host", "reg/mpe2/spread/random-v0")]
    assert split_remote_source("hf://farama-minari/mujoco/hopper/expert-v0") == (
        "hf://farama-minari", "mujoco/hopper/expert-v0")  # as minari.download_dataset splits
    with pytest.raises(InvalidDatasetIdError, match="does not end in a dataset id"):
        candidate_splits("http://host/registry/")
    with pytest.raises(DatasetNotFoundError, match="no registry along"):
        split_remote_source(f"file://{registry_dir}/mpe2/spread/other-v0")


class _IndexesHandler(SimpleHTTPRequestHandler):
    """Serves a folder holding a registry at ``/registry``. The longest registry a URL of it
    can name, ``/registry/mpe2/spread``, has its index answered only once the index of the
    one that publishes the dataset, ``/registry``, was asked for (up to a minute: a lookup
    that asks one index after the other never sends it meanwhile). ``failing`` indexes are
    answered 500."""

    overlapped: ClassVar[list[bool]]
    asked: ClassVar[threading.Event]
    failing: ClassVar[frozenset[str]] = frozenset()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        if self.path == "/registry/_index.json":
            self.asked.set()
        if self.path == "/registry/mpe2/spread/_index.json":
            self.overlapped.append(self.asked.wait(60))
        if self.path in self.failing:
            self.send_error(500)
            return
        super().do_GET()


def _indexes_handler(*, waiting: bool = True, **attributes: Any) -> type[_IndexesHandler]:
    asked = threading.Event()
    if not waiting:
        asked.set()
    return type("Indexes", (_IndexesHandler,), {"overlapped": [], "asked": asked, **attributes})


def test_candidate_registries_are_asked_at_once_and_taken_in_order(
        registry_dir: Path, published: str,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """A URL names four candidate registries; their indexes are asked for together (the
    longest one's answer waits for the publishing one's request), and the first in order
    that lists the id is the one used, though a later one answered first."""
    handler = _indexes_handler()
    host = thread_server(registry_dir.parent, handler)
    url = f"{host}/{registry_dir.name}/{published}"
    assert len(candidate_splits(url)) == 4
    assert split_remote_source(url) == (f"{host}/{registry_dir.name}", published)
    assert handler.overlapped == [True]


def test_a_failing_registry_after_the_one_that_publishes_is_never_reported(
        registry_dir: Path, published: str,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """The host's root answers 500 for its index: asked for with the others, but it comes
    after the registry that lists the id, so it is never looked at. The same failure before
    that registry is the lookup's error, as when the indexes were asked one by one."""
    host = thread_server(registry_dir.parent,
                         _indexes_handler(waiting=False, failing={"/_index.json"}))
    url = f"{host}/{registry_dir.name}/{published}"
    assert split_remote_source(url) == (f"{host}/{registry_dir.name}", published)
    host = thread_server(registry_dir.parent, _indexes_handler(
        waiting=False, failing={"/registry/mpe2/_index.json"}))
    with pytest.raises(RemoteError, match="HTTP 500"):
        split_remote_source(f"{host}/{registry_dir.name}/{published}")


class _HungRootIndex(_IndexesHandler):
    """The host's root holds its index's answer until the test releases it."""

    release: ClassVar[threading.Event]
    answered: ClassVar[list[str]]

    def do_GET(self) -> None:
        if self.path == "/_index.json":
            self.release.wait(60)
            self.answered.append(self.path)
        super().do_GET()


def test_a_slow_registry_after_the_one_that_publishes_is_not_waited_for(
        registry_dir: Path, published: str,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """The lookup returns while the host's root still holds its index's answer."""
    release = threading.Event()
    handler = type("Hung", (_HungRootIndex,), {
        "overlapped": [], "asked": threading.Event(), "release": release, "answered": []})
    handler.asked.set()
    host = thread_server(registry_dir.parent, handler)
    try:
        assert split_remote_source(f"{host}/{registry_dir.name}/{published}") == (
            f"{host}/{registry_dir.name}", published)
        assert handler.answered == []
    finally:
        release.set()


def test_credentials_stay_out_of_names_and_origins(registry_dir: Path, published: str,
                                                   http_server: Callable[[Path], str]) -> None:
    base = http_server(registry_dir)
    url = base.replace("http://", "http://reader:s3cret-pass@") + f"/{published}"
    buffer, state = make_buffer([url], sample_batch_size=2, sample_sequence_length=1)
    assert "s3cret" not in origin_path(published).read_text()
    from marl_minari.sources import open_source

    assert "s3cret" not in open_source(url).name


def test_cli_combines_a_local_and_a_remote_dataset(registry_dir: Path, published: str,
                                                   small_dataset: Callable[..., str]) -> None:
    import subprocess
    import sys

    small_dataset(LOCAL)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "marl_minari", "combine", *args],
                              capture_output=True, text=True, timeout=300)

    done = run(LOCAL, f"file://{registry_dir}/{published}", "--dataset-id", "mpe2/spread/cli-v0")
    assert done.returncode == 0, done.stderr
    assert mm.load_dataset("mpe2/spread/cli-v0").total_episodes == 4
    missing = run(LOCAL, f"file://{registry_dir}/mpe2/spread/missing-v0", "--dataset-id",
                  "mpe2/spread/cli-v1")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert [line for line in missing.stderr.splitlines() if line.startswith("error:")] == [
        line for line in missing.stderr.splitlines() if "no registry along" in line]


@pytest.mark.parametrize("url", ["http://[::1/registry/mpe2/spread/one-v0",
                                 "http://127.0.0.1:99999/registry/mpe2/spread/one-v0"])
@pytest.mark.parametrize("door", ["open_source", "load_dataset", "open_source streaming",
                                  "load_dataset streaming"])
def test_a_malformed_url_is_a_remote_error_saying_what_a_url_holds(url: str, door: str) -> None:
    """An unclosed IPv6 bracket escaped as ``ValueError: Invalid IPv6 URL``; the hint that
    the registry's errors gave had its ``[user:password@`` taken for a credential."""
    name, _, streaming = door.partition(" ")
    with pytest.raises(RemoteError, match=r"malformed URL .* expected http://host\[:port\]/path,"
                                          r" with a port from 0 to 65535, an IPv6 host in "
                                          r"brackets and any credentials as user:password@"):
        getattr(mm, name)(url, streaming=bool(streaming))
