"""strata_tool: the command-line companion of the strata allocator (`strata`).

Subcommands live in their own modules and register themselves in cli.py; today
`strata bench` compares strata with glibc, jemalloc, tcmalloc and mimalloc.
"""

__version__ = "0.1.0"
