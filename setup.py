"""Maps the repository's top-level folders into one import package, `agora`.

The folders stay where shared/DESIGN.md puts them (master/, agent/, ...), and install as
agora.master, agora.agent, ...: `pip install` adds a single top-level package. Everything
else about the distribution is in pyproject.toml.
"""

from setuptools import find_packages, setup

# Import name -> folder; subpackages follow their folder (master/allocator: agora.master.allocator).
FOLDERS = {
    "agora": "agora",
    "agora.v1": "protos/agora/v1",
    "agora.common": "common",
    "agora.master": "master",
    "agora.agent": "agent",
    "agora.frameworks": "frameworks",
    "agora.cli": "cli",
    "agora.experiments": "experiments",
}

packages = []
for name, folder in FOLDERS.items():
    packages.append(name)
    packages.extend(f"{name}.{sub}" for sub in find_packages(folder))

# Files served as they are: the dashboard's page, script and style. Their folder is named as a
# package too (setuptools sees any folder under a package as one, and warns otherwise).
packages.append("agora.master.dashboard.static")
PACKAGE_DATA = {"agora.master.dashboard.static": ["*"], "agora.agent": ["task_wrapper.c"]}

setup(packages=packages, package_dir=FOLDERS, package_data=PACKAGE_DATA)
