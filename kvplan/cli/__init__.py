"""The interface layer: the `kvplan` command line (Typer), one module per command group over one console.

app.py holds the app and its command table (validate, simulate, schema, catalog, model build-tiny);
deploy.py, plan.py, imports.py, live.py and doctor.py the commands of their concern; common.py the
options and progress they share; files.py which existing file an output may replace (--overwrite);
console.py how text reaches the terminal; usage.py the usage
lines; summary.py the tables validate and catalog print; crash.py the report of an internal error.
Nothing outside this package imports it: it calls the library and prints.
"""

from .app import app, main

__all__ = ["app", "main"]
