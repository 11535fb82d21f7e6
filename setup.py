"""What the wheel holds beyond pyproject.toml: the package, and the top-level configs/ and experiments/ folders
carried inside it as ``tpusim/_shipped/configs`` and ``tpusim/_shipped/experiments``, so one copy of each file is
kept in the source tree and an install finds them (``tpusim.config.catalog.shipped``)."""

from setuptools import find_namespace_packages, setup

SHIPPED = {"tpusim._shipped.configs": "configs", "tpusim._shipped.experiments": "experiments"}
# every folder below them is a (data-only) package of its own, as setuptools wants for the files it holds
FOLDERS = [f"{package}.{sub}" for package, folder in SHIPPED.items() for sub in find_namespace_packages(where=folder)]

setup(
    packages=[*find_namespace_packages(include=["tpusim*"]), *SHIPPED, *FOLDERS],
    package_dir=SHIPPED,
    package_data={package: ["*.yaml", "*.csv", "*.md"] for package in [*SHIPPED, *FOLDERS]},
)
