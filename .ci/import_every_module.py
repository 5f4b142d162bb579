"""Import every module of the installed marl_minari, failing if one of the package's own
modules is missing or if the package is not the installed one (a checkout on sys.path would
hide a broken wheel).

A module that imports a third-party package the venv lacks (an extra's: JAX, torch, Ray, ...)
is reported, not failed: the wheel has the module, and installing its extra makes it
importable. A missing ``marl_minari`` module fails."""

import importlib
import pkgutil
import sys
import sysconfig
from pathlib import Path

import marl_minari

site = Path(sysconfig.get_paths()["purelib"]).resolve()
package = Path(marl_minari.__file__).resolve().parent
if site not in package.parents:
    sys.exit(f"marl_minari comes from {package}, not from the venv's {site}")

# __main__ runs the command line when imported: README's first command runs it instead.
names = [info.name for info in pkgutil.walk_packages(marl_minari.__path__, "marl_minari.")
         if not info.name.endswith(".__main__")]
needs_extra = {}
for name in names:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        if not error.name or error.name.split(".")[0] == "marl_minari":
            raise
        needs_extra[name] = error.name
print(f"imported {len(names) - len(needs_extra)} of {len(names)} modules of {package}; "
      f"{len(needs_extra)} need a package of an extra this venv lacks: "
      + ", ".join(f"{name} ({missing})" for name, missing in sorted(needs_extra.items())))
