"""Fixtures for the container image tests: the image, built once per run, and
containers that are removed after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.image.image_tools import BuiltImage, Containers, build_image, missing_prerequisites


def _require_podman() -> None:
    missing = missing_prerequisites()
    if missing:
        pytest.fail(
            f"the image tests need {', '.join(missing)} (make test installs them); deselect them with -m 'not podman'"
        )


@pytest.fixture(scope="session")
def image() -> BuiltImage:
    """The project's image from the working tree on a local debootstrap base.

    Built once per test session (all image tests share one xdist group);
    podman's layer cache keeps an unchanged tree fast across sessions.
    """
    _require_podman()
    return build_image()


@pytest.fixture(scope="session")
def full_image() -> BuiltImage:
    """The same with the optional Kubernetes and libvirt plugins."""
    _require_podman()
    return build_image(plugins=("kubernetes", "libvirt"))


@pytest.fixture
def containers() -> Iterator[Containers]:
    started = Containers()
    try:
        yield started
    finally:
        started.remove_all()
