"""Code-owned tool-call policy for self-update cycles (SPEC §8.4).

A self-update cycle is an autonomous agent run (Claude Code, Codex, Gemini CLI, Copilot
CLI) that works in a contained git clone of a workspace. Every PreToolUse event of such a
session is judged here before any managed hook handler runs, and again on every handler's
``modify`` replacement. The policy is code rather than configuration on purpose: no
``TACHOGRAPH_HOOKS`` document, hook answer or prompt can relax it. The agent improving a
workspace must not be able to reach credentials, git remotes, package registries'
publish endpoints, the operator's checkout or the server's data, and it must not be able
to talk its way past the rule that says so.

What it refuses (``Denial.rule``):

- ``outside-clone``: a file tool's path, a patch target or a shell argument outside the
  clone (absolute paths, ``..`` escapes, ``~`` and ``$HOME``), and any unknown tool whose
  input values look like such paths.
- ``protected-path``: paths at or below ``protected_roots`` (a protected root that holds
  the clone still protects everything around it), and the agents' own hook and
  permission settings inside the clone (``.claude/settings*.json``,
  ``.gemini/settings.json``, ``.codex/``, ``.copilot/``, ``.github/hooks/``,
  ``.mcp.json``): governance, not workspace content. Writes (file tools other than
  readers, redirections, commands not on ``READERS``) to whatever
  domain/protected_paths.py protects: agent instructions (``CLAUDE.md``, ``AGENTS.md``,
  ``.claude/``...), git's own files (``.git/``, ``.gitattributes``) and CI.
- ``credentials``: credential and git-internal files anywhere, inside the clone too
  (``.env``, ``.env.*``, ``.envrc``, ``.ssh``, ``.git/config``, ``.git/hooks``, ``*.pem``,
  ``*.key``, ``.netrc``, ``.npmrc``, ``.pypirc``, ``.aws``, ``.docker/config.json``,
  ``id_rsa*`` and the other SSH key names, ``.gnupg``, ``.git-credentials``, ``.kube``),
  key and secret tools (``ssh-add``, ``gpg``, ``pass``, ...), ``git credential`` and
  reads of git configuration that can hold credentials (``git config --list``,
  ``remote.*``, ``url.*``, ``http.*``, ``credential.*``).
- ``git-remote``: ``git push``, ``git remote``, fetching or pulling from a configured
  remote, and the other commands that talk to remotes (``send-email``, ``lfs push``...).
- ``git-config``: ``git config --global``/``--system``/``--edit``, and writes of keys
  (also through ``git -c`` and ``GIT_CONFIG_*``) outside a short list of harmless ones:
  many git keys run commands (``core.sshCommand``, ``core.fsmonitor``, ``alias.*``).
- ``publish``: publishing, deploying, releasing and service control (``npm publish``,
  ``twine upload``, ``docker push``, ``kubectl``, ``terraform apply``, ``gh release``,
  ``gh pr merge``, ``systemctl``, ``reboot``, ``crontab``, ...).
- ``network``: fetches from anything but loopback (``curl``, ``wget``, ``nc``, ``ssh``,
  ``scp``, remote ``rsync``, ``git clone``/``fetch``/``pull`` of a URL, web fetch and
  search tools, cloud CLIs). Package installs are a decision: installing *named*
  packages from the configured index (``pip install x``, ``npm install``) is allowed,
  because which index that is belongs to the executor's environment and whether it is
  reachable to the sandbox; naming a non-loopback URL, VCS URL, index or registry (in an
  argument, an option or a ``*_INDEX_URL``/``*_REGISTRY``/``*_PROXY`` variable) is
  refused, and so are writes of package-manager configuration.
- ``sudo``: ``sudo``, ``su``, ``doas`` and friends, privileged containers.
- ``unrestricted-shell``: code the policy cannot see: ``eval``, command text computed at
  run time (``bash -c "$X"``), piping or substituting a program into a shell or
  interpreter (``| sh``, ``bash <(...)``), arithmetic over values only known at run
  time, ``tmux``/``screen``, and anything that does not parse. Nested commands
  (``bash -c``, ``$(...)``, ``find -exec``, ``env``, ``timeout``, ``uv run`` ...) are
  evaluated recursively and report the innermost rule.
- The closed list's rules (domain/shell/allowlist.py): ``dynamic-command-word``,
  ``unanalysed-wrapper``, ``inline-interpreter``, ``unresolved-path-expansion``,
  ``awk-sed-io``, ``exec-changing-env``, ``command-redefinition``, ``process-control``
  and ``unknown-command`` for any command without a judge here that is not on
  ``KNOWN_COMMANDS``. docs/autonomy.md lists what each refuses.

The rules consume the shell analysis's value (domain/shell/): ``evaluate`` runs
``analyse_tool_call`` once (its quote-aware lexer and parser, its walker with one module
per command family, its tool dispatch) and derives the refusal from what the call would
do: each path read or written is judged by ``Scope`` (domain/self_update_paths.py:
``outside-clone``, ``protected-path``, ``credentials``), each non-loopback endpoint is
``network``, each git operation that talks to remotes is ``git-remote``, each action is
the rule of its kind (``sudo``, ``publish``, ``git-config``...), and each thing the
analysis could not follow is the rule of its kind (``unrestricted-shell``,
``dynamic-command-word``...). A call that breaks several rules is refused for the fact
the shell would meet first, which is the refusal the walk used to stop at.

Its limits, stated plainly: this is a policy on the tool calls an agent *declares*, not a
sandbox. A program the agent runs (a test suite, a script it wrote, a Makefile target,
a patch or archive it applies, a package's install hook) can still do whatever its OS
permissions allow; symlinks are not followed (judging is lexical, so the result does not depend
on the file system); recursive reads of a directory (``grep -r``, ``tar``) can include
credential or protected files it holds, and so can recursive writes (``rm -rf .``);
MCP tools are opaque. That is why cycles also
run in the executor's sandbox with a scrubbed environment and a clone that holds no
secrets: this policy is the first, legible layer, which refuses the obvious and tells the
agent why in one sentence it can act on.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.self_update_paths import Scope
from domain.shell.analysis import analyse_tool_call
from domain.shell.result import EVAL, ToolCallAnalysis
from domain.shell.tables import GIT_REMOTE_COMMANDS
from domain.shell.tools import Tools  # the analysis's tool dispatch, re-exported
from domain.shell.verdict import (
    CREDENTIALS,
    GIT_CONFIG,
    GIT_REMOTE,
    NETWORK,
    OUTSIDE_CLONE,
    PROTECTED_PATH,
    PUBLISH,
    RULES,
    SUDO,
    UNRESTRICTED_SHELL,
    Denial,
    network_denial,
    quoted,
    refused,
)

__all__ = [
    "CREDENTIALS",
    "GIT_CONFIG",
    "GIT_REMOTE",
    "NETWORK",
    "OUTSIDE_CLONE",
    "PROTECTED_PATH",
    "PUBLISH",
    "RULES",
    "SUDO",
    "Tools",
    "UNRESTRICTED_SHELL",
    "Denial",
    "evaluate",
    "evaluate_command",
    "judge_analysis",
]


# Actions whose kind is not the name of the rule that refuses them.
_ACTION_RULES = {EVAL: UNRESTRICTED_SHELL}


def evaluate(
    tool_name: str,
    tool_input: object,
    *,
    clone_root: str,
    protected_roots: Sequence[str] = (),
    cwd: str | None = None,
) -> Denial | None:
    """Judge one PreToolUse call of a self-update session: a Denial, or None to allow.

    ``tool_input`` is the tool's input as the agent sent it: usually a JSON object, a
    string for patch tools (Copilot's ``apply_patch``), an argv list for Codex's shell.
    ``clone_root`` and ``protected_roots`` must be absolute; ``cwd`` (the hook payload's
    working directory, when known) anchors relative paths and must lie inside the clone.
    An input the policy cannot evaluate is refused, never allowed.
    """
    scope = Scope(clone_root, protected_roots)
    base = scope.resolve(cwd, scope.clone) if cwd else scope.clone
    if cwd:
        denial = scope.judge(base, cwd)
        if denial:
            return Denial(
                denial.rule,
                f"The agent's working directory {quoted(cwd)} is not a place a self-update "
                f"cycle may work ({denial.rule}), so every tool call is refused.",
            )
    try:
        return judge_analysis(
            analyse_tool_call(tool_name, tool_input, base, toplevel=scope.clone), scope
        )
    except Exception:  # fail closed: an input that breaks the evaluator is not allowed
        return Denial(
            UNRESTRICTED_SHELL,
            f"The {quoted(tool_name)} call could not be evaluated by the self-update "
            "policy, so it is refused rather than allowed.",
        )


def judge_analysis(analysis: ToolCallAnalysis, scope: Scope) -> Denial | None:
    """The rules over what a tool call would do: the first fact, in the order the shell
    would meet it, that a rule refuses names the Denial (so a call that breaks two rules
    is refused for the one it would break first)."""
    found: list[tuple[int, Denial]] = [
        (unclear.order, Denial(unclear.kind, unclear.reason))
        for unclear in analysis.not_understood
        if unclear.kind in RULES
    ]
    found.extend(
        (action.order, Denial(_ACTION_RULES.get(action.kind, action.kind), action.reason))
        for action in analysis.actions
    )
    found.extend(
        (
            endpoint.order,
            network_denial(_subject(analysis, endpoint.order, endpoint.target), endpoint.target),
        )
        for endpoint in analysis.endpoints
        if not endpoint.loopback
    )
    why = (
        "a self-update cycle works in its own clone and may not push to, fetch from or "
        "change git remotes"
    )
    found.extend(
        (operation.order, refused(GIT_REMOTE, _subject(analysis, operation.order, "git"), why))
        for operation in analysis.git
        if operation.op in GIT_REMOTE_COMMANDS
    )
    first = min((order for order, _ in found), default=None)
    for use in analysis.paths:
        if first is not None and use.order > first:
            break
        denial = scope.judge_use(use)
        if denial:
            return denial
    return min(found, key=lambda pair: pair[0])[1] if found else None


def evaluate_command(
    command: str,
    *,
    clone_root: str,
    protected_roots: Sequence[str] = (),
    cwd: str | None = None,
) -> Denial | None:
    """Judge one shell command line as a self-update session's shell tool would run it."""
    return evaluate(
        "Bash",
        {"command": command},
        clone_root=clone_root,
        protected_roots=protected_roots,
        cwd=cwd,
    )


def _subject(analysis: ToolCallAnalysis, order: int, named: str) -> str:
    """What a reason names for a fact: the command it belongs to if that names ``named``
    (a prefix such as ``PIP_INDEX_URL=...`` comes before its command) or ``named`` is only
    known at run time (``?``), else ``named``."""
    runs = [run for run in analysis.commands if run.order < order]
    argv = runs[-1].argv if runs else ()
    known = "?" not in named
    return " ".join(argv) if argv and (not known or any(named in w for w in argv)) else named
