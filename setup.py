"""Build step: copy the top-level data directories into the wheel as package data.

sql/, migrations/ and extension/ stay at the top of the repository (where they are
edited and reviewed); a wheel ships them in donto_pg/_data/, next to the demo's
example conversation, where donto_pg.resources finds them. Editable installs read
the checkout's own directories, so nothing is copied for them. Everything else is in
pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# Directory in the repository -> the same path under donto_pg/_data/ in the wheel.
DATA = ["sql", "migrations", "extension", "examples/beam/README.md",
        "examples/beam/chats/100K/13"]


class build_py_with_data(build_py):  # noqa: N801 - setuptools command naming
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "donto_pg" / "_data"
        for name in DATA:
            src, dst = HERE / name, target / name
            if not src.exists():
                raise FileNotFoundError(f"{src}: missing from the source tree (see MANIFEST.in)")
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(src, dst)


setup(cmdclass={"build_py": build_py_with_data})
