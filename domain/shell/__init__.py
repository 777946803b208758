"""The shell analysis: what an agent's tool call would do, as a plain value.

- ``syntax``: the bash lexer, parser and tree;
- ``state``, ``paths``: the walk's words and state, lexical path resolution;
- ``walker``, ``command``, ``commands/``: the walk, and one judge module per command
  family (files, builtins, interpreters, network, packages, git, services);
- ``tools``: which part of each runtime's tool input is a command, a path, a patch, a URL;
- ``analysis``, ``result``: the public surface, ``analyse_tool_call`` and the
  ``ToolCallAnalysis`` it returns (import them from those modules).

The self-update rules (domain/self_update_policy.py, domain/self_update_paths.py) are a
consumer of that value. Pure: the standard library only, no I/O.
"""
