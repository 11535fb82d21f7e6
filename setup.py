"""What the wheel holds beyond pyproject.toml: the package, and the top-level configs/ and experiments/ folders
carried inside it as ``tpusim/_shipped/configs`` and ``tpusim/_shipped/experiments``, so one copy of each file is
kept in the source tree and an install finds them (``tpusim.config.catalog.shipped``)."""

from setuptools import find_namespace_packages, setup

SHIPPED = {"tpusim._shipped.configs": "configs", "tpusim._shipped.experiments": "experiments"}

setup(
    packages=[*find_namespace_packages(include=["tpusim*"]), *SHIPPED],
    package_dir=SHIPPED,
    package_data={
        "tpusim._shipped.configs": ["hardware/*.yaml", "models/*.yaml", "measurements/*.csv", "measurements/*.md"],
        "tpusim._shipped.experiments": ["*/*.yaml"],
    },
)
