"""The git side of a self-update cycle: a contained clone in, one reviewed commit out.

A cycle never lets the agent work in the operator's registered checkout. Instead:

1. `checkout_state(repo)` says whether the checkout may be cycled (a git work tree,
   at its top, with commits and no staged, unstaged or untracked change outside
   ignored files) and captures its HEAD, branch and a digest of its remotes.
2. `prepare_clone(repo, dest, branch, base=head)` makes a full, independent copy
   (`git clone --no-local`: a pack made by upload-pack, so no hardlinks, no
   alternates, nothing copied from the source's object directory but reachable
   objects) on a new branch at `base`, with every remote removed and a local
   committer identity, so the agent can commit without any global configuration.
3. `inspect_change(clone)` makes the bounded patch of `base..HEAD` and its digest and
   says what is wrong with it, if anything (`Change.problem`): among others, a path
   that `domain.protected_paths.is_protected` names (secrets, git's machinery, the
   agents' instruction and configuration files, CI) touched by any commit.
   `prepare_review(repo, change, dest, branch)` makes the reviewer's working tree: a
   fresh clone of the registered repository at the base with exactly the inspected
   patch applied, checked to be HEAD's tree, so nothing else of the clone reaches it.
4. `import_commit(repo, clone, ...)` recomputes all of that immediately before it
   mutates anything, refuses (`ImportRefused`) unless it is exactly what was
   reviewed, then fetches the commit's objects into the registered repository and
   creates exactly one ref under `refs/tachograph/self-update/` with a create-only
   `update-ref`. The working tree, index, HEAD, branches, tags, FETCH_HEAD and
   config of the registered repository are never written.
5. `discard_ref(repo, ref)` deletes such a ref again (and nothing else).

Digests are `sha256:<hex>` (as learned-target digests are): `Change.digest` is the
SHA-256 of the patch bytes exactly as `Change.patch` holds them when within the
limit, so anyone holding the patch can check it; `remotes_digest` is the SHA-256 of
the sorted lines of `git remote -v` (URLs are hashed, never shown).

The patch is `git diff --binary --full-index --no-renames --no-ext-diff --no-textconv`
of `base` against `HEAD`, made in an attribute-free view of the clone (an empty work
tree and no index, so neither a `.gitattributes` the agent wrote nor a diff driver
can change how the patch looks or hide a text file as binary). It includes
deletions, mode changes, symlinks and binary files, and `git apply` accepts it.

Hardening. Every git call runs with a scrubbed environment: nothing from the
server's environment but `PATH` (no `GIT_DIR`, `GIT_SSH_COMMAND`, credentials, ...),
`HOME` and `XDG_CONFIG_HOME` in a fresh empty directory, no system or global config
(`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), no prompts, no replace
objects, no grafts, no optional locks (so `git status` never rewrites an index), and
only the `file` protocol. `HARDENING` (runner.py) is passed with `-c` to every call,
each with a timeout; a failure raises `GitError` with the tail of git's stderr.

The clone's `.git` has been writable by the agent, and a repository's own config can
make git run commands (`core.fsmonitor`, `core.hooksPath`, `diff.<x>.textconv`,
`filter.<x>.clean`, `include.path`/`includeIf` pulling in any of those, ...). The
`-c` overrides cover the keys we know; because filter and diff driver names are open
ended, inspection also rewrites the clone's `.git/config` to the one
`prepare_clone` wrote and removes `config.worktree`, `info/attributes`,
`info/exclude` and planted hooks (`Change.restored` names what it put back), and it
refuses a clone whose `.git` borrows from elsewhere (alternates, `commondir`,
`shallow`, grafts, symbolic links at the top of `.git`, `.git` not a directory).

Consequences and limits:
- The operator's global and system git configuration is not read, so a global
  excludes file does not hide files from the cleanliness check (use
  `.git/info/exclude`), and global filters (e.g. Git LFS) do not run: an LFS repository
  is cloned with pointer files. Submodules are not cloned.
- This is containment, not a sandbox: the agent runs as the same OS user. It keeps
  the agent's git activity away from the registered checkout and makes sure only the
  reviewed, digest-checked commit lands, as a ref nobody checks out.
- The digest covers the net patch; the imported ref also carries the intermediate
  commits of `base..HEAD`. Protected paths are checked in every one of them, but
  their other contents are not part of the review.
- The clone's canonical config assumes a POSIX filesystem with exec bits
  (`core.filemode = true`), as the server's Linux image has.

Where it lives: runner.py runs git (the hardening, timeouts and output caps) and
raises git's errors (`GitError`, `GitCommandError`, `GitTimeout`); results.py holds the
values handed back (`CheckoutState`, `Clone`, `Change`); readers.py the small readers
of git's output the others share; clone.py `checkout_state`, `prepare_clone` and the
canonical config it writes and inspection restores; change.py `inspect_change` and
`prepare_review`; refs.py `import_commit` and `discard_ref`. Each refusal
(`CloneRefused`, `ReviewRefused`, `ImportRefused`) sits with the operation that
raises it. Import from the module that holds a name (this package re-exports
nothing, as no package here does).
"""
